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

{{- define "iceberg-catalog.chartSecret.enabled" -}}
{{- if or (include "iceberg-catalog.chartSecret.database" .) (include "iceberg-catalog.chartSecret.s3" .) }}true{{ end }}
{{- end }}

{{/* ---------------------------------------------------------------------------------------
Configuration (CATALOG_* environment variables)
--------------------------------------------------------------------------------------- */}}

{{- define "iceberg-catalog.warehouse" -}}
{{- if .Values.warehouse }}
{{- .Values.warehouse }}
{{- else }}
{{- printf "s3://%s/" (required "set warehouse or s3.bucket" .Values.s3.bucket) }}
{{- end }}
{{- end }}

{{/* The database URL built from parts; $(DATABASE_PASSWORD) is expanded by Kubernetes. */}}
{{- define "iceberg-catalog.databaseUrlFromParts" -}}
{{- $db := .Values.database }}
{{- $url := printf "%s://%s:$(DATABASE_PASSWORD)@%s:%v/%s" $db.driver $db.user (required "database.host is required" $db.host) $db.port $db.name }}
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
{{- if and $db.existingSecret $db.urlKey }}
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
{{- end }}
