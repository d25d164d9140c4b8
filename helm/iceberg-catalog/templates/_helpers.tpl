{{/* ---------------------------------------------------------------------------------------
Names and labels
--------------------------------------------------------------------------------------- */}}

{{- define "iceberg-catalog.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-scoped name; the release name alone when it already contains the chart name. */}}
{{- define "iceberg-catalog.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "iceberg-catalog.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "iceberg-catalog.labels" -}}
helm.sh/chart: {{ include "iceberg-catalog.chart" . }}
{{ include "iceberg-catalog.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "iceberg-catalog.selectorLabels" -}}
app.kubernetes.io/name: {{ include "iceberg-catalog.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The server pods (the migration Job's pods carry component=migration and are not selected). */}}
{{- define "iceberg-catalog.serverSelectorLabels" -}}
{{ include "iceberg-catalog.selectorLabels" . }}
app.kubernetes.io/component: server
{{- end }}

{{- define "iceberg-catalog.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "iceberg-catalog.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "iceberg-catalog.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion | toString) }}
{{- end }}

{{/* ---------------------------------------------------------------------------------------
Secrets
--------------------------------------------------------------------------------------- */}}

{{/* The chart's own Secret: same name as the release resources. */}}
{{- define "iceberg-catalog.secretName" -}}
{{- include "iceberg-catalog.fullname" . }}
{{- end }}

{{/* "true" when the database settings come from the chart's Secret. */}}
{{- define "iceberg-catalog.chartSecret.database" -}}
{{- if not .Values.database.existingSecret }}true{{ end }}
{{- end }}

{{/* "true" when the S3 keys come from the chart's Secret. */}}
{{- define "iceberg-catalog.chartSecret.s3" -}}
{{- if and (not .Values.s3.existingSecret) .Values.s3.accessKeyId }}true{{ end }}
{{- end }}

{{/* "true" when the token signing key / the built-in clients / the metrics token come from the chart's Secret. */}}
{{- define "iceberg-catalog.chartSecret.tokenSecret" -}}
{{- if and (not .Values.auth.tokenSecret.existingSecret) .Values.auth.tokenSecret.value }}true{{ end }}
{{- end }}

{{- define "iceberg-catalog.chartSecret.clients" -}}
{{- if and (not .Values.auth.clients.existingSecret) .Values.auth.clients.value }}true{{ end }}
{{- end }}

{{- define "iceberg-catalog.chartSecret.metricsToken" -}}
{{- if and (not .Values.auth.metricsToken.existingSecret) .Values.auth.metricsToken.value }}true{{ end }}
{{- end }}

{{/* "true" when the warehouses' secrets key comes from the chart's Secret. */}}
{{- define "iceberg-catalog.chartSecret.secretsKey" -}}
{{- if and (not .Values.warehouses.secretsKey.existingSecret) .Values.warehouses.secretsKey.value }}true{{ end }}
{{- end }}

{{- define "iceberg-catalog.chartSecret.auth" -}}
{{- if or (include "iceberg-catalog.chartSecret.tokenSecret" .) (include "iceberg-catalog.chartSecret.clients" .) (include "iceberg-catalog.chartSecret.metricsToken" .) }}true{{ end }}
{{- end }}

{{/* "true" when the Azure account key comes from the chart's Secret. */}}
{{- define "iceberg-catalog.chartSecret.azure" -}}
{{- if and (not .Values.azure.existingSecret) .Values.azure.accountKey }}true{{ end }}
{{- end }}

{{- define "iceberg-catalog.chartSecret.enabled" -}}
{{- if or (include "iceberg-catalog.chartSecret.database" .) (include "iceberg-catalog.chartSecret.s3" .) (include "iceberg-catalog.chartSecret.azure" .) (include "iceberg-catalog.chartSecret.auth" .) (include "iceberg-catalog.chartSecret.secretsKey" .) }}true{{ end }}
{{- end }}

{{/*
One secretKeyRef env entry for an auth value: {name, spec: {existingSecret, key, value}, chartKey, root}.
existingSecret wins (key `spec.key`); otherwise the chart's Secret (key `chartKey`).
*/}}
{{- define "iceberg-catalog.authSecretEnv" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ .spec.existingSecret | default (include "iceberg-catalog.secretName" .root) }}
      key: {{ ternary .spec.key .chartKey (not (empty .spec.existingSecret)) }}
{{- end }}

{{/* ---------------------------------------------------------------------------------------
Configuration (CATALOG_* environment variables)
--------------------------------------------------------------------------------------- */}}

{{- define "iceberg-catalog.warehouse" -}}
{{- if .Values.warehouse }}
{{- .Values.warehouse }}
{{- else if include "iceberg-catalog.embedded" . }}
{{- printf "%s/warehouse" (trimSuffix "/" .Values.dataVolume.mountPath) }}
{{- else }}
{{- printf "s3://%s/" (required "set warehouse or s3.bucket" .Values.s3.bucket) }}
{{- end }}
{{- end }}

{{/* The database URL built from parts; $(DATABASE_PASSWORD) is expanded by Kubernetes. */}}
{{- define "iceberg-catalog.databaseUrlFromParts" -}}
{{- $db := .Values.database }}
{{- $url := printf "%s://%s:$(DATABASE_PASSWORD)@%s:%v/%s" $db.driver $db.user ($db.host | default "postgresql") $db.port $db.name }}
{{- $params := list }}
{{- range $key := keys $db.params | sortAlpha }}
{{- $params = append $params (printf "%s=%v" $key (get $db.params $key)) }}
{{- end }}
{{- if $params }}
{{- $url = printf "%s?%s" $url (join "&" $params) }}
{{- end }}
{{- $url }}
{{- end }}

{{/*
CATALOG_DATABASE_URL (and the DATABASE_PASSWORD it expands). One definition for the Deployment
and the migration Job, so every replica and the Job see the same URL.
*/}}
{{- define "iceberg-catalog.databaseEnv" -}}
{{- $db := .Values.database }}
{{- if include "iceberg-catalog.embedded" . }}
- name: CATALOG_DATABASE_URL
  value: {{ printf "sqlite:///%s" (include "iceberg-catalog.sqlitePath" .) | quote }}
{{- else if and $db.existingSecret $db.urlKey }}
- name: CATALOG_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ $db.existingSecret }}
      key: {{ $db.urlKey }}
{{- else if and (not $db.existingSecret) $db.url }}
- name: CATALOG_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "iceberg-catalog.secretName" . }}
      key: database-url
{{- else }}
- name: DATABASE_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $db.existingSecret | default (include "iceberg-catalog.secretName" .) }}
      key: {{ ternary $db.passwordKey "database-password" (not (empty $db.existingSecret)) }}
- name: CATALOG_DATABASE_URL
  value: {{ include "iceberg-catalog.databaseUrlFromParts" . | quote }}
{{- end }}
{{- with $db.poolSize }}
- name: CATALOG_DB_POOL_SIZE
  value: {{ . | quote }}
{{- end }}
{{- end }}

{{/* Warehouse and S3 settings. */}}
{{- define "iceberg-catalog.storageEnv" -}}
- name: CATALOG_WAREHOUSE
  value: {{ include "iceberg-catalog.warehouse" . | quote }}
{{- with .Values.allowedLocations }}
- name: CATALOG_ALLOWED_LOCATIONS
  value: {{ join "," . | quote }}
{{- end }}
{{- with .Values.s3.endpoint }}
- name: CATALOG_S3_ENDPOINT
  value: {{ . | quote }}
{{- end }}
{{- with .Values.s3.region }}
- name: CATALOG_S3_REGION
  value: {{ . | quote }}
{{- end }}
- name: CATALOG_S3_PATH_STYLE_ACCESS
  value: {{ .Values.s3.pathStyleAccess | toString | quote }}
{{- with .Values.s3.clientEndpoint }}
- name: CATALOG_S3_CLIENT_ENDPOINT
  value: {{ . | quote }}
{{- end }}
{{- if not (kindIs "invalid" .Values.s3.clientPathStyleAccess) }}
- name: CATALOG_S3_CLIENT_PATH_STYLE_ACCESS
  value: {{ .Values.s3.clientPathStyleAccess | toString | quote }}
{{- end }}
{{- if .Values.s3.vendCredentials }}
- name: CATALOG_S3_VEND_CREDENTIALS
  value: "true"
- name: CATALOG_S3_STS_ROLE_ARN
  value: {{ required "s3.sts.roleArn is required with s3.vendCredentials (the server's own keys are never vended)" .Values.s3.sts.roleArn | quote }}
{{- with .Values.s3.sts.endpoint }}
- name: CATALOG_S3_STS_ENDPOINT
  value: {{ . | quote }}
{{- end }}
- name: CATALOG_S3_STS_DURATION_SECONDS
  value: {{ .Values.s3.sts.durationSeconds | toString | quote }}
{{- end }}
{{- if .Values.s3.remoteSigning }}
- name: CATALOG_S3_REMOTE_SIGNING
  value: "true"
{{- end }}
{{- if or .Values.s3.existingSecret (include "iceberg-catalog.chartSecret.s3" .) }}
{{- $secret := .Values.s3.existingSecret | default (include "iceberg-catalog.secretName" .) }}
- name: CATALOG_S3_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ ternary .Values.s3.accessKeyIdKey "s3-access-key-id" (not (empty .Values.s3.existingSecret)) }}
- name: CATALOG_S3_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ ternary .Values.s3.secretAccessKeyKey "s3-secret-access-key" (not (empty .Values.s3.existingSecret)) }}
{{- end }}
{{- with .Values.azure.blobEndpoint }}
- name: CATALOG_AZURE_BLOB_ENDPOINT
  value: {{ . | quote }}
{{- end }}
{{- with .Values.azure.clientBlobEndpoint }}
- name: CATALOG_AZURE_CLIENT_BLOB_ENDPOINT
  value: {{ . | quote }}
{{- end }}
{{- if .Values.azure.vendCredentials }}
- name: CATALOG_AZURE_VEND_CREDENTIALS
  value: "true"
- name: CATALOG_AZURE_SAS_SCOPE
  value: {{ .Values.azure.sasScope | quote }}
- name: CATALOG_AZURE_SAS_DURATION_SECONDS
  value: {{ .Values.azure.sasDurationSeconds | toString | quote }}
{{- end }}
{{- if or .Values.azure.existingSecret (include "iceberg-catalog.chartSecret.azure" .) }}
- name: CATALOG_AZURE_ACCOUNT_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .Values.azure.existingSecret | default (include "iceberg-catalog.secretName" .) }}
      key: {{ ternary .Values.azure.accountKeyKey "azure-account-key" (not (empty .Values.azure.existingSecret)) }}
{{- end }}
{{- with .Values.gcs.project }}
- name: CATALOG_GCS_PROJECT
  value: {{ . | quote }}
{{- end }}
{{- with .Values.gcs.endpoint }}
- name: CATALOG_GCS_ENDPOINT
  value: {{ . | quote }}
{{- end }}
{{- with .Values.gcs.clientEndpoint }}
- name: CATALOG_GCS_CLIENT_ENDPOINT
  value: {{ . | quote }}
{{- end }}
{{- if .Values.gcs.vendCredentials }}
- name: CATALOG_GCS_VEND_CREDENTIALS
  value: "true"
{{- end }}
{{- if or .Values.warehouses.secretsKey.existingSecret .Values.warehouses.secretsKey.value }}
{{ include "iceberg-catalog.authSecretEnv" (dict "name" "CATALOG_SECRETS_KEY" "spec" .Values.warehouses.secretsKey "chartKey" "secrets-key" "root" .) }}
{{- end }}
{{- end }}

{{/* ---------------------------------------------------------------------------------------
Authentication and authorization
--------------------------------------------------------------------------------------- */}}

{{/* "true" when tokens can come from an OIDC provider. */}}
{{- define "iceberg-catalog.auth.oidc" -}}
{{- if or .Values.auth.oidc.issuer .Values.auth.oidc.jwksUrl }}true{{ end }}
{{- end }}

{{/* "true" when built-in client-credentials clients are configured. */}}
{{- define "iceberg-catalog.auth.clients" -}}
{{- if or .Values.auth.clients.existingSecret .Values.auth.clients.value }}true{{ end }}
{{- end }}

{{- define "iceberg-catalog.auth.tokenSecret" -}}
{{- if or .Values.auth.tokenSecret.existingSecret .Values.auth.tokenSecret.value }}true{{ end }}
{{- end }}

{{- define "iceberg-catalog.auth.metricsToken" -}}
{{- if or .Values.auth.metricsToken.existingSecret .Values.auth.metricsToken.value }}true{{ end }}
{{- end }}

{{/*
Refuse value sets that install but cannot work. Included by the Deployment (always rendered).
*/}}
{{- define "iceberg-catalog.validateAuth" -}}
{{- $auth := .Values.auth }}
{{- if and $auth.enabled (not (include "iceberg-catalog.auth.oidc" .)) (not (include "iceberg-catalog.auth.clients" .)) }}
{{- fail "auth.enabled=true but no client could obtain a token: set auth.oidc.issuer (or auth.oidc.jwksUrl) for tokens from your identity provider, and/or built-in clients (auth.clients.existingSecret or auth.clients.value); otherwise every /v1 request is refused 401" }}
{{- end }}
{{- if and (include "iceberg-catalog.auth.clients" .) (not (include "iceberg-catalog.auth.tokenSecret" .)) }}
{{- $where := "each server process" }}
{{- if .Values.autoscaling.enabled }}
{{- $where = printf "each of the autoscaled pods (up to %v)" .Values.autoscaling.maxReplicas }}
{{- else if gt (int (include "iceberg-catalog.replicas" .)) 1 }}
{{- $where = printf "each of the %v replicas" (include "iceberg-catalog.replicas" .) }}
{{- end }}
{{- fail (printf "built-in clients (auth.clients) need auth.tokenSecret (existingSecret or value, >= 32 bytes): without it %s draws its own random signing key, so a token issued by one is refused by the others, and by every pod after a restart" $where) }}
{{- end }}
{{- if and (include "iceberg-catalog.chartSecret.tokenSecret" .) (lt (len $auth.tokenSecret.value) 32) }}
{{- fail "auth.tokenSecret.value must be at least 32 bytes (the HS256 signing key of built-in tokens); generate one with: openssl rand -base64 48" }}
{{- end }}
{{- if and .Values.serviceMonitor.enabled (include "iceberg-catalog.chartSecret.metricsToken" .) .Values.serviceMonitor.namespace (ne .Values.serviceMonitor.namespace .Release.Namespace) }}
{{- fail "serviceMonitor.namespace differs from the release namespace, but the ServiceMonitor's bearerTokenSecret must be in its own namespace: put the metrics token in a Secret there and set auth.metricsToken.existingSecret" }}
{{- end }}
{{- end }}

{{/* "true" when a bootstrap policy is given (a non-empty YAML string or object). */}}
{{- define "iceberg-catalog.authzBootstrap.enabled" -}}
{{- if .Values.authorization.bootstrap }}true{{ end }}
{{- end }}

{{- define "iceberg-catalog.authzBootstrap.configMapName" -}}
{{- printf "%s-authz" (include "iceberg-catalog.fullname" . | trunc 57 | trimSuffix "-") }}
{{- end }}

{{- define "iceberg-catalog.warehouses.dir" -}}/etc/iceberg-catalog-warehouses{{- end }}
{{- define "iceberg-catalog.warehouses.path" -}}{{ include "iceberg-catalog.warehouses.dir" . }}/warehouses.yaml{{- end }}

{{- /* A warehouses file: the user's Secret (warehouses.existingSecret) or the chart's, rendered from
warehouses.declared (a Secret too: the profiles hold storage keys). Not both. */}}
{{- define "iceberg-catalog.warehouses.enabled" -}}
{{- if and .Values.warehouses.existingSecret .Values.warehouses.declared }}
{{- fail "warehouses: set existingSecret or declared, not both" }}
{{- end }}
{{- if or .Values.warehouses.existingSecret .Values.warehouses.declared }}true{{- end }}
{{- end }}

{{- define "iceberg-catalog.warehouses.secretName" -}}
{{- .Values.warehouses.existingSecret | default (printf "%s-warehouses" (include "iceberg-catalog.fullname" . | trunc 52 | trimSuffix "-")) }}
{{- end }}

{{- define "iceberg-catalog.warehouses.key" -}}
{{- if .Values.warehouses.existingSecret }}{{ .Values.warehouses.key }}{{ else }}warehouses.yaml{{ end }}
{{- end }}

{{- define "iceberg-catalog.authzBootstrap.dir" -}}/etc/iceberg-catalog{{- end }}
{{- define "iceberg-catalog.authzBootstrap.path" -}}{{ include "iceberg-catalog.authzBootstrap.dir" . }}/authz.yaml{{- end }}

{{/*
The bootstrap grants as YAML, from authorization.bootstrap (a YAML string or an object), checked and
normalised: YAML 1.1 (Helm's parser) reads an unquoted `on:` key as `true`, so a grant's `true` key
is renamed back to `on`, and the output quotes it.
*/}}
{{- define "iceberg-catalog.authzBootstrap" -}}
{{- $doc := .Values.authorization.bootstrap }}
{{- if kindIs "string" $doc }}
{{- $doc = fromYaml $doc }}
{{- if hasKey $doc "Error" }}
{{- fail (printf "authorization.bootstrap is not a YAML mapping: %s" (get $doc "Error")) }}
{{- end }}
{{- end }}
{{- if not (kindIs "slice" (get $doc "grants")) }}
{{- fail "authorization.bootstrap must have a `grants:` list (see the chart README)" }}
{{- end }}
{{- $privileges := list "read" "write" "alter" "manage-properties" "create" "drop" "purge" "register" "manage-grants" "admin" }}
{{- $grants := list }}
{{- range $i, $grant := get $doc "grants" }}
{{- if not (kindIs "map" $grant) }}
{{- fail (printf "authorization.bootstrap grants[%d] must be a mapping {principal, privileges, on}" $i) }}
{{- end }}
{{- $g := deepCopy $grant }}
{{- if and (hasKey $g "true") (not (hasKey $g "on")) }}
{{- $_ := set $g "on" (get $g "true") }}
{{- $_ := unset $g "true" }}
{{- end }}
{{- if not (regexMatch "^(user|client|role):.+" (toString (get $g "principal"))) }}
{{- fail (printf "authorization.bootstrap grants[%d].principal must be user:<name>, client:<id> or role:<group>, got %v" $i (get $g "principal")) }}
{{- end }}
{{- $privs := get $g "privileges" }}
{{- if or (not (kindIs "slice" $privs)) (empty $privs) }}
{{- fail (printf "authorization.bootstrap grants[%d].privileges must be a non-empty list" $i) }}
{{- end }}
{{- range $privs }}
{{- if not (has . $privileges) }}
{{- fail (printf "authorization.bootstrap grants[%d]: unknown privilege %v (known: %s)" $i . (join ", " $privileges)) }}
{{- end }}
{{- end }}
{{- $on := get $g "on" }}
{{- $onOk := eq (toString $on) "catalog" }}
{{- if kindIs "map" $on }}
{{- $onOk = and (eq (len $on) 1) (or (hasKey $on "namespace") (hasKey $on "table") (hasKey $on "view")) }}
{{- end }}
{{- if not $onOk }}
{{- fail (printf "authorization.bootstrap grants[%d].on must be catalog or one of {namespace: a.b}, {table: a.b.t}, {view: a.b.v}" $i) }}
{{- end }}
{{- $grants = append $grants $g }}
{{- end }}
{{- toYaml (dict "grants" $grants) }}
{{- end }}

{{/* CATALOG_* authentication and authorization settings of the server. */}}
{{- define "iceberg-catalog.eventsEnv" -}}
{{- $events := .Values.events }}
- name: CATALOG_EVENTS_ENABLED
  value: {{ $events.enabled | toString | quote }}
- name: CATALOG_EVENTS_RETENTION
  value: {{ $events.retention | quote }}
- name: CATALOG_EVENTS_MAX_ROWS
  value: {{ $events.maxRows | toString | quote }}
{{- with $events.webhooks }}
- name: CATALOG_EVENTS_WEBHOOKS
  value: {{ . | quote }}
{{- end }}
{{- if $events.webhookSecret.name }}
- name: CATALOG_EVENTS_WEBHOOK_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ $events.webhookSecret.name }}
      key: {{ $events.webhookSecret.key }}
{{- end }}
{{- with $events.natsUrl }}
- name: CATALOG_EVENTS_NATS_URL
  value: {{ . | quote }}
- name: CATALOG_EVENTS_NATS_SUBJECT
  value: {{ $events.natsSubject | quote }}
{{- end }}
{{- with .Values.tracing.otlpEndpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ . | quote }}
{{- end }}
{{- end }}

{{- define "iceberg-catalog.authEnv" -}}
{{- $auth := .Values.auth }}
- name: CATALOG_AUTH_REQUIRED
  value: {{ $auth.enabled | toString | quote }}
{{- if include "iceberg-catalog.auth.oidc" . }}
{{- with $auth.oidc.issuer }}
- name: CATALOG_OIDC_ISSUER
  value: {{ . | quote }}
{{- end }}
{{- with $auth.oidc.jwksUrl }}
- name: CATALOG_OIDC_JWKS_URL
  value: {{ . | quote }}
{{- end }}
{{- with $auth.oidc.audience }}
- name: CATALOG_OIDC_AUDIENCE
  value: {{ . | quote }}
{{- end }}
- name: CATALOG_OIDC_PRINCIPAL_CLAIM
  value: {{ $auth.oidc.principalClaim | quote }}
- name: CATALOG_OIDC_GROUPS_CLAIM
  value: {{ $auth.oidc.groupsClaim | quote }}
- name: CATALOG_OIDC_LEEWAY_SECONDS
  value: {{ $auth.oidc.leewaySeconds | quote }}
{{- end }}
{{- if include "iceberg-catalog.auth.clients" . }}
{{ include "iceberg-catalog.authSecretEnv" (dict "name" "CATALOG_OAUTH_CLIENTS" "spec" $auth.clients "chartKey" "oauth-clients" "root" .) }}
{{- end }}
{{- if include "iceberg-catalog.auth.tokenSecret" . }}
{{ include "iceberg-catalog.authSecretEnv" (dict "name" "CATALOG_TOKEN_SECRET" "spec" $auth.tokenSecret "chartKey" "token-secret" "root" .) }}
{{- end }}
{{- with $auth.tokenTtlSeconds }}
- name: CATALOG_TOKEN_TTL_SECONDS
  value: {{ . | quote }}
{{- end }}
{{- with $auth.trustedProxies }}
- name: CATALOG_TRUSTED_PROXIES
  value: {{ . | quote }}
{{- end }}
{{- if include "iceberg-catalog.auth.metricsToken" . }}
{{ include "iceberg-catalog.authSecretEnv" (dict "name" "CATALOG_METRICS_TOKEN" "spec" $auth.metricsToken "chartKey" "metrics-token" "root" .) }}
{{- end }}
{{- if $auth.enabled }}
- name: CATALOG_AUTHORIZATION
  value: {{ .Values.authorization.mode | quote }}
- name: CATALOG_AUTHZ_CACHE_SECONDS
  value: {{ .Values.authorization.cacheSeconds | quote }}
{{- end }}
{{- if include "iceberg-catalog.authzBootstrap.enabled" . }}
- name: CATALOG_AUTHZ_BOOTSTRAP
  value: {{ include "iceberg-catalog.authzBootstrap.path" . | quote }}
{{- end }}
{{- if include "iceberg-catalog.warehouses.enabled" . }}
- name: CATALOG_WAREHOUSES_FILE
  value: {{ include "iceberg-catalog.warehouses.path" . | quote }}
{{- end }}
{{- end }}

{{/* ---------------------------------------------------------------------------------------
Storage and database: local data, replicas, passwords
--------------------------------------------------------------------------------------- */}}

{{/*
"true" for the embedded default: no database configured (database.url, .existingSecret, .host and
.password all empty). The catalog is then SQLite and a local warehouse on one volume (dataVolume.source,
or a PersistentVolumeClaim the chart makes, see persistence), one pod, no migration Job: what
`helm install` with no values runs. Setting the database (PostgreSQL) leaves it.
*/}}
{{- define "iceberg-catalog.embedded" -}}
{{- $db := .Values.database }}
{{- if not (or $db.url $db.existingSecret $db.host $db.password) }}true{{ end }}
{{- end }}

{{/* Pods when autoscaling is off: replicaCount, or when it is null 1 (embedded) or 2 (PostgreSQL). */}}
{{- define "iceberg-catalog.replicas" -}}
{{- if kindIs "invalid" .Values.replicaCount }}{{ ternary 1 2 (eq (include "iceberg-catalog.embedded" .) "true") }}{{ else }}{{ .Values.replicaCount }}{{ end }}
{{- end }}

{{/* The migration Job runs: migration.enabled, and not the embedded default (the server migrates SQLite). */}}
{{- define "iceberg-catalog.migrationJob" -}}
{{- if and .Values.migration.enabled (not (include "iceberg-catalog.embedded" .)) }}true{{ end }}
{{- end }}

{{/* The volume source mounted at dataVolume.mountPath (YAML), or "": the embedded default's own claim. */}}
{{- define "iceberg-catalog.dataVolumeSource" -}}
{{- if .Values.dataVolume.source }}
{{- toYaml .Values.dataVolume.source }}
{{- else if include "iceberg-catalog.embedded" . }}
persistentVolumeClaim:
  claimName: {{ include "iceberg-catalog.fullname" . }}-data
{{- end }}
{{- end }}

{{/* "true" when more than one server pod may run at once. */}}
{{- define "iceberg-catalog.manyPods" -}}
{{- if .Values.autoscaling.enabled }}
{{- if gt (int .Values.autoscaling.maxReplicas) 1 }}true{{ end }}
{{- else if gt (int (include "iceberg-catalog.replicas" .)) 1 }}true{{ end }}
{{- end }}

{{- define "iceberg-catalog.podCount" -}}
{{- if .Values.autoscaling.enabled }}up to {{ .Values.autoscaling.maxReplicas }} autoscaled pods{{ else }}{{ include "iceberg-catalog.replicas" . }} replicas{{ end }}
{{- end }}

{{/* The local path of the warehouse, or "" when it is in S3, Azure or Google Cloud Storage. */}}
{{- define "iceberg-catalog.localWarehouse" -}}
{{- $w := include "iceberg-catalog.warehouse" . | lower }}
{{- if not (regexMatch "^(s3|s3a|s3n|abfs|abfss|wasb|wasbs|gs)://" $w) }}
{{- trimPrefix "file://" $w }}
{{- end }}
{{- end }}

{{/* The SQLite file of database.url ("" unless a SQLite URL is given inline), absolute in the pod. */}}
{{- define "iceberg-catalog.sqlitePath" -}}
{{- $url := .Values.database.url }}
{{- if include "iceberg-catalog.embedded" . }}
{{- printf "%s/catalog.db" (trimSuffix "/" .Values.dataVolume.mountPath) }}
{{- else if and $url (not .Values.database.existingSecret) (hasPrefix "sqlite" $url) }}
{{- $path := regexReplaceAll "\\?.*$" (regexReplaceAll "^sqlite[^:]*:///" $url "") "" }}
{{- if hasPrefix "/" $path }}{{ $path }}{{ else }}/var/lib/iceberg-catalog/{{ $path }}{{ end }}
{{- end }}
{{- end }}

{{/* "true" when a path in the pod is on dataVolume. */}}
{{- define "iceberg-catalog.onDataVolume" -}}
{{- $mount := trimSuffix "/" .root.Values.dataVolume.mountPath }}
{{- if and (include "iceberg-catalog.dataVolumeSource" .root) (or (eq .path $mount) (hasPrefix (printf "%s/" $mount) .path)) }}true{{ end }}
{{- end }}

{{/*
Refuse value sets that install but cannot work: local data shared by several pods, local data on the
read-only root filesystem (or on no volume at all), an empty database password. Included by the
Deployment.
*/}}
{{- define "iceberg-catalog.validateStorage" -}}
{{- $many := include "iceberg-catalog.manyPods" . }}
{{- $pods := include "iceberg-catalog.podCount" . }}
{{- $readOnly := .Values.securityContext.readOnlyRootFilesystem }}
{{- $db := .Values.database }}
{{- $sqlite := include "iceberg-catalog.sqlitePath" . }}
{{- $local := include "iceberg-catalog.localWarehouse" . }}
{{- if and (not $db.existingSecret) (not $db.url) (not $db.password) (not (include "iceberg-catalog.embedded" .)) }}
{{- fail (printf "database.password is empty: the chart builds the PostgreSQL URL %s://%s:<password>@%s:%v/%s from database.* and this password, and PostgreSQL refuses an empty one; set database.password, database.existingSecret (key database.passwordKey) or a whole database.url" $db.driver $db.user ($db.host | default "postgresql") $db.port $db.name) }}
{{- end }}
{{- if and $sqlite $many (include "iceberg-catalog.embedded" .) }}
{{- fail (printf "the embedded default (no database.* set: SQLite %s and a local warehouse on one volume) serves one pod, but %s would run: each would see a different catalog; for several pods set a PostgreSQL database (database.host and .password, .existingSecret or .url) and an s3:// warehouse" $sqlite $pods) }}
{{- end }}
{{- if and $sqlite $many }}
{{- fail (printf "database.url is SQLite (%s) but %s would run: each pod would open its own file on its own disk and see a different catalog; use PostgreSQL for several pods, or replicaCount: 1 with autoscaling off" $sqlite $pods) }}
{{- end }}
{{- if and $sqlite .Values.migration.enabled (not (include "iceberg-catalog.embedded" .)) }}
{{- fail "database.url is SQLite but migration.enabled=true: the migration Job runs in its own pod and would migrate a file the server never sees; set migration.enabled=false (the server migrates a SQLite file itself at start)" }}
{{- end }}
{{- if and $local $many }}
{{- fail (printf "warehouse %s is a local directory but %s would run: each would write its own directory (and clients could read none of them); use an s3:// warehouse for several pods, or replicaCount: 1 with autoscaling off" $local $pods) }}
{{- end }}
{{- range $what, $path := dict "warehouse" $local "the SQLite file of database.url" $sqlite }}
{{- if and $path (not (include "iceberg-catalog.onDataVolume" (dict "root" $ "path" $path))) }}
{{- if $readOnly }}
{{- fail (printf "%s (%s) is on the pod's read-only root filesystem (securityContext.readOnlyRootFilesystem=true), so the server cannot write it: mount a volume over it with dataVolume.source (and dataVolume.mountPath), or use s3:// and PostgreSQL" $what $path) }}
{{- else }}
{{- fail (printf "%s (%s) is on no volume: it would be lost whenever the pod is replaced; mount one over it with dataVolume.source (and dataVolume.mountPath), or use s3:// and PostgreSQL" $what $path) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
