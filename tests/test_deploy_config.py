"""Deployment configuration: the Helm chart, compose.yaml and the Dockerfile, checked without a cluster,
a helm binary or a Docker engine.

* The chart is rendered through Helm's own Go SDK (``helm-python-sdk``) for several value sets; every
  manifest is validated against the Kubernetes OpenAPI schemas (``kubernetes-validate``, offline,
  strict: unknown fields are errors). The ServiceMonitor (a CRD) is checked by shape instead.
  Then the wiring is asserted: hooks, probes, Secrets, the database URL, replicas, HPA target.
* compose.yaml is validated against the Compose Specification JSON schema (vendored by
  ``check-jsonschema``), then its wiring is asserted.
* Every ``CATALOG_*`` variable used anywhere is a field of ``catalog.settings.Settings``.

Missing tools skip these tests locally, with the reason; with ``CI=true`` they fail instead (reported as
fixture errors, so the run exits non-zero).
"""

from __future__ import annotations

import base64
import copy
import fnmatch
import functools
import http.server
import importlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.support import ROOT, skip_or_fail

CHART = ROOT / "helm" / "iceberg-catalog"
COMPOSE = ROOT / "compose.yaml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"

RELEASE = "lake"
NAMESPACE = "data"
FULLNAME = f"{RELEASE}-iceberg-catalog"
PORT = 8181

# The server's documented configuration interface (used when catalog.settings cannot be imported).
INTERFACE_ENV = frozenset(
    {
        "CATALOG_DATABASE_URL",
        "CATALOG_WAREHOUSE",
        "CATALOG_HOST",
        "CATALOG_PORT",
        "CATALOG_WORKERS",
        "CATALOG_PREFIX",
        "CATALOG_S3_ENDPOINT",
        "CATALOG_S3_REGION",
        "CATALOG_S3_ACCESS_KEY_ID",
        "CATALOG_S3_SECRET_ACCESS_KEY",
        "CATALOG_S3_PATH_STYLE_ACCESS",
        "CATALOG_DB_POOL_SIZE",
        "CATALOG_LOG_LEVEL",
        # Authentication and authorization (docs: the chart README, "Authentication and authorization").
        "CATALOG_AUTH_REQUIRED",
        "CATALOG_OAUTH_CLIENTS",
        "CATALOG_TOKEN_SECRET",
        "CATALOG_TOKEN_TTL_SECONDS",
        "CATALOG_OIDC_ISSUER",
        "CATALOG_OIDC_AUDIENCE",
        "CATALOG_OIDC_JWKS_URL",
        "CATALOG_OIDC_PRINCIPAL_CLAIM",
        "CATALOG_OIDC_GROUPS_CLAIM",
        "CATALOG_OIDC_LEEWAY_SECONDS",
        "CATALOG_METRICS_TOKEN",
        "CATALOG_AUTHORIZATION",
        "CATALOG_AUTHZ_BOOTSTRAP",
        "CATALOG_AUTHZ_CACHE_SECONDS",
    }
)
# Secret material: only ever from a secretKeyRef, never a literal value in a pod spec.
SECRET_ENV = frozenset(
    {
        "DATABASE_PASSWORD",
        "CATALOG_S3_ACCESS_KEY_ID",
        "CATALOG_S3_SECRET_ACCESS_KEY",
        "CATALOG_AZURE_ACCOUNT_KEY",
        "CATALOG_OAUTH_CLIENTS",
        "CATALOG_TOKEN_SECRET",
        "CATALOG_METRICS_TOKEN",
    }
)
CATALOG_VAR = re.compile(r"(?<![A-Za-z0-9_])CATALOG_[A-Z0-9_]+")
K8S_VAR_REF = re.compile(r"(?<!\$)\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


# ---------------------------------------------------------------------------------------------
# Optional tools: skip locally, fail in CI.
# ---------------------------------------------------------------------------------------------


def _require(module: str, pip_name: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        message = f"{pip_name} is not installed (pip install {pip_name}): {exc}"
        skip_or_fail(message)


@pytest.fixture(scope="module")
def helm() -> ModuleType:
    return _require("helm_python", "helm-python-sdk")


@pytest.fixture(scope="module")
def kv() -> ModuleType:
    return _require("kubernetes_validate.utils", "kubernetes-validate")


@pytest.fixture(scope="module")
def compose_schema() -> dict[str, Any]:
    schemas = _require("check_jsonschema.builtin_schemas", "check-jsonschema")
    return schemas.get_builtin_schema("vendor.compose-spec")


# ---------------------------------------------------------------------------------------------
# The allowed CATALOG_* names: the Settings fields when importable, else the documented interface.
# ---------------------------------------------------------------------------------------------


def _settings_env_names() -> frozenset[str] | None:
    try:
        from catalog.settings import Settings
    except Exception:  # noqa: BLE001 - the server package may be absent or broken; fall back
        return None
    prefix = str(Settings.model_config.get("env_prefix", "CATALOG_"))
    names: set[str] = set()
    for name, field in Settings.model_fields.items():
        names.add(f"{prefix}{name}".upper())
        for alias in (field.alias, field.validation_alias):
            if isinstance(alias, str):
                names.add(alias.upper())
    return frozenset(names)


def allowed_catalog_env() -> frozenset[str]:
    return _settings_env_names() or INTERFACE_ENV


def test_settings_cover_the_documented_interface() -> None:
    """The deployment files use the documented names; the server must still read all of them."""
    names = _settings_env_names()
    if names is None:
        pytest.skip("catalog.settings.Settings is not importable; the documented list is used instead")
    assert names >= INTERFACE_ENV, f"Settings lost documented variables: {sorted(INTERFACE_ENV - names)}"


# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------

VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    # warehouses besides the default, from a Secret of the user's (README "Warehouses")
    "warehouses": {"warehouses": {"existingSecret": "lake-warehouses"}},
    # ... or declared in values, rendered into a Secret of the chart's
    "warehouses-declared": {
        "warehouses": {
            "declared": [
                {
                    "name": "team-a",
                    "location": "s3://lake-a/warehouse",
                    "s3": {
                        "endpoint": "http://minio:9000",
                        "region": "us-east-1",
                        "access-key-id": "team-a",
                        "secret-access-key": "team-a-secret-access-key",
                        "path-style-access": True,
                    },
                    "maintenance": {"max-snapshot-age-ms": 86400000},
                },
                {
                    "name": "team-b",
                    "location": "abfss://lake@account.dfs.core.windows.net/warehouse",
                    "azure": {"account-key": "dGVhbS1iLWFjY291bnQta2V5", "vend-credentials": True},
                },
            ]
        }
    },
    "hpa": {
        "autoscaling": {
            "enabled": True,
            "minReplicas": 3,
            "maxReplicas": 7,
            "targetCPUUtilizationPercentage": 60,
            "targetMemoryUtilizationPercentage": 80,
        }
    },
    "ingress": {
        "ingress": {
            "enabled": True,
            "className": "nginx",
            "annotations": {"nginx.ingress.kubernetes.io/proxy-body-size": "64m"},
            "hosts": [{"host": "catalog.example.com", "paths": [{"path": "/", "pathType": "Prefix"}]}],
            "tls": [{"secretName": "catalog-tls", "hosts": ["catalog.example.com"]}],
        }
    },
    "existing-secrets": {
        "database": {"host": "pg.example", "existingSecret": "pg-cred", "passwordKey": "pw"},
        "s3": {
            "endpoint": "http://minio.storage:9000",
            "pathStyleAccess": True,
            "bucket": "lakehouse",
            "existingSecret": "s3-cred",
            "accessKeyIdKey": "id",
            "secretAccessKeyKey": "secret",
        },
    },
    "existing-url-secret": {
        "database": {"existingSecret": "pg-url", "urlKey": "url"},
        "warehouse": "s3://bucket/prefix",
    },
    "inline-secrets": {
        "database": {"url": "postgresql+psycopg://cat:pw@pg:5432/cat"},
        "s3": {
            "endpoint": "http://minio:9000",
            "pathStyleAccess": True,
            "accessKeyId": "admin",
            "secretAccessKey": "password",
        },
    },
    # Azure and GCS warehouses on several pods: not local, so no volume is needed.
    "azure": {
        "replicaCount": 2,
        "warehouse": "abfss://lake@acct.dfs.core.windows.net/wh",
        "azure": {"accountKey": "a2V5", "vendCredentials": True, "sasScope": "container"},
    },
    "azure-existing-secret": {
        "warehouse": "wasbs://lake@acct.blob.core.windows.net/wh",
        "azure": {"existingSecret": "az", "accountKeyKey": "key", "blobEndpoint": "http://azurite:10000/acct"},
    },
    "gcs": {
        "replicaCount": 2,
        "warehouse": "gs://lake/wh",
        "gcs": {"project": "p", "vendCredentials": True, "clientEndpoint": "https://storage.example"},
    },
    "service-monitor": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}},
    "no-migration": {"migration": {"enabled": False}, "database": {"password": "s3cr3t"}},
    # Tokens from an identity provider only; grants given as an object.
    "auth-oidc": {
        "auth": {
            "enabled": True,
            "oidc": {
                "issuer": "https://idp.example/realms/lake",
                "audience": "iceberg-catalog",
                "jwksUrl": "https://idp.example/realms/lake/protocol/openid-connect/certs",
                "principalClaim": "preferred_username",
                "groupsClaim": "realm_access.roles",
                "leewaySeconds": 30,
            },
        },
        "authorization": {
            "cacheSeconds": 2.5,
            "bootstrap": {
                "grants": [
                    {"principal": "role:platform", "privileges": ["admin"], "on": "catalog"},
                    {"principal": "user:ingest", "privileges": ["write"], "on": {"table": "raw.events"}},
                    {"principal": "role:analysts", "privileges": ["read"], "on": {"namespace": "analytics"}},
                ]
            },
        },
    },
    # Built-in clients, signing key and metrics token from Secrets you manage; autoscaled; grants as a
    # YAML string (with the bare `on:` that YAML 1.1 reads as true).
    "auth-existing-secrets": {
        "auth": {
            "enabled": True,
            "clients": {"existingSecret": "catalog-auth", "key": "clients"},
            "tokenSecret": {"existingSecret": "catalog-auth", "key": "signing-key"},
            "tokenTtlSeconds": 900,
            "metricsToken": {"existingSecret": "catalog-metrics", "key": "token"},
        },
        "authorization": {
            "mode": "grants",
            "bootstrap": "grants:\n  - principal: user:admin\n    privileges: [admin]\n    on: catalog\n",
        },
        "autoscaling": {"enabled": True, "minReplicas": 2, "maxReplicas": 6},
        "serviceMonitor": {"enabled": True},
    },
    # Everything auth-related given as values: kept in the chart's own Secret; OIDC and clients together.
    "auth-inline-secrets": {
        "replicaCount": 3,
        "auth": {
            "enabled": True,
            "oidc": {"issuer": "https://login.example"},
            "clients": {"value": "admin:admin-secret-value,spark:spark-secret-value"},
            "tokenSecret": {"value": "an-inline-signing-key-of-at-least-32-bytes"},
            "metricsToken": {"value": "an-inline-metrics-token"},
        },
        "authorization": {"mode": "none"},
        "serviceMonitor": {"enabled": True},
    },
    "everything": {
        "replicaCount": 5,
        "image": {"repository": "registry.example/iceberg-catalog", "tag": "1.2.3", "pullPolicy": "Always"},
        "imagePullSecrets": [{"name": "regcred"}],
        "catalog": {"port": 9000, "workers": 4, "logLevel": "debug", "prefix": "lake"},
        "database": {
            "host": "pg",
            "password": "pw",
            "params": {"sslmode": "require", "connect_timeout": 5},
            "poolSize": 20,
        },
        "s3": {"endpoint": "http://minio:9000", "pathStyleAccess": True, "accessKeyId": "a", "secretAccessKey": "b"},
        "extraEnv": [{"name": "TZ", "value": "UTC"}],
        "serviceAccount": {"create": False, "name": "catalog-irsa"},
        "service": {"type": "LoadBalancer", "port": 80},
        "podDisruptionBudget": {"minAvailable": "50%"},
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "lake", "effect": "NoSchedule"}],
        "affinity": {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "iceberg-catalog"}},
                        },
                    }
                ]
            }
        },
        "ingress": {"enabled": True, "hosts": [{"host": "c.example", "paths": [{"path": "/v1"}]}]},
        "serviceMonitor": {"enabled": True},
        "autoscaling": {"enabled": True, "minReplicas": 2, "maxReplicas": 4},
    },
    # The embedded mode in Kubernetes: one pod, SQLite and a local warehouse on a volume, no migration Job.
    "single-pod-local": {
        "replicaCount": 1,
        "database": {"url": "sqlite:////var/lib/iceberg-catalog/catalog.db"},
        "warehouse": "/var/lib/iceberg-catalog/warehouse",
        "dataVolume": {"source": {"persistentVolumeClaim": {"claimName": "lake"}}},
        "migration": {"enabled": False},
    },
}
# With no database set the chart runs the embedded default (one pod, SQLite on its own claim: see the
# embedded-default tests at the end of this file). These sets are about PostgreSQL deployments: every
# set that builds the URL from parts gives a password (the chart refuses an empty one), so "defaults"
# is the chart's defaults plus that PostgreSQL password.
for _values in VALUE_SETS.values():
    _db = _values.setdefault("database", {})
    if not (_db.get("url") or _db.get("existingSecret") or _db.get("password")):
        _db["password"] = "pw"


class Rendered:
    """The manifests of one rendering, parsed."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files
        self.notes = next((text for path, text in files.items() if path.endswith("NOTES.txt")), "")
        self.docs: list[dict[str, Any]] = []
        for path, text in sorted(files.items()):
            if path.endswith(".txt") or not text.strip():
                continue
            for doc in yaml.safe_load_all(text):
                if doc:
                    doc.setdefault("__file__", path)
                    self.docs.append(doc)

    def manifests(self) -> list[dict[str, Any]]:
        return [{k: v for k, v in d.items() if k != "__file__"} for d in self.docs]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == kind]

    def one(self, kind: str) -> dict[str, Any]:
        found = self.of_kind(kind)
        assert len(found) == 1, f"expected one {kind}, got {[d['metadata']['name'] for d in found]}"
        return found[0]

    def maybe(self, kind: str) -> dict[str, Any] | None:
        found = self.of_kind(kind)
        assert len(found) <= 1
        return found[0] if found else None

    def chart_secrets(self) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        for secret in self.of_kind("Secret"):
            data = {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}
            data.update(secret.get("stringData") or {})
            out[secret["metadata"]["name"]] = data
        return out


@pytest.fixture(scope="module")
def chart(helm: ModuleType) -> Iterator[Any]:
    with helm.Chart.load(str(CHART)) as loaded:
        yield loaded


@pytest.fixture(scope="module")
def render(chart: Any) -> Any:
    @functools.cache
    def _render(name: str) -> Rendered:
        values = copy.deepcopy(VALUE_SETS[name])
        return Rendered(chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True))

    return _render


def server_container(rendered: Rendered) -> dict[str, Any]:
    pod = rendered.one("Deployment")["spec"]["template"]["spec"]
    (container,) = [c for c in pod["containers"] if c["name"] == "catalog"]
    return container


def migrate_container(rendered: Rendered) -> dict[str, Any]:
    (container,) = rendered.one("Job")["spec"]["template"]["spec"]["containers"]
    return container


def resolve_env(container: dict[str, Any], secrets: dict[str, dict[str, str]]) -> dict[str, str]:
    """Resolve a container's env the way the kubelet does: in order, with $(VAR) expansion.

    Values from Secrets the chart does not render (existingSecret) become ``<secret NAME/KEY>``.
    """
    resolved: dict[str, str] = {}
    for entry in container.get("env", []):
        name = entry["name"]
        assert name not in resolved, f"{name} is defined twice"
        if "value" in entry:
            value = K8S_VAR_REF.sub(lambda m: resolved.get(m.group(1), m.group(0)), str(entry["value"]))
        else:
            source = entry["valueFrom"]
            assert set(source) == {"secretKeyRef"}, f"{name}: unexpected source {source}"
            ref = source["secretKeyRef"]
            if ref["name"] in secrets:
                assert ref["key"] in secrets[ref["name"]], f"{name}: key {ref['key']} missing in {ref['name']}"
                value = secrets[ref["name"]][ref["key"]]
            else:
                value = f"<secret {ref['name']}/{ref['key']}>"
        resolved[name] = value
    return resolved


def hook_annotations(doc: dict[str, Any]) -> dict[str, Any]:
    annotations = doc["metadata"].get("annotations") or {}
    return {
        "hooks": set(filter(None, str(annotations.get("helm.sh/hook", "")).split(","))),
        "weight": int(annotations.get("helm.sh/hook-weight", 0)),
        "delete": set(filter(None, str(annotations.get("helm.sh/hook-delete-policy", "")).split(","))),
    }


# ---------------------------------------------------------------------------------------------
# Chart: lint, schema, Kubernetes validation
# ---------------------------------------------------------------------------------------------


def kube_versions(kv: ModuleType) -> list[str]:
    """The oldest shipped version the chart supports (>= 1.25) and the newest shipped."""
    versions = sorted(set(kv.all_versions()), key=lambda v: tuple(int(p) for p in v.split(".")))
    supported = [v for v in versions if tuple(int(p) for p in v.split(".")[:2]) >= (1, 25)]
    assert supported, f"kubernetes-validate ships no version >= 1.25: {versions}"
    return sorted({supported[0], supported[-1]})


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_helm_lint(helm: ModuleType, value_set: str) -> None:
    report = helm.lint(str(CHART), copy.deepcopy(VALUE_SETS[value_set]), strict=True, kube_version="v1.30.0")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not problems and not report["errors"], report


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
@pytest.mark.slow
def test_manifests_validate_against_kubernetes_schemas(render: Any, kv: ModuleType, value_set: str) -> None:
    rendered = render(value_set)
    kinds = {d["kind"] for d in rendered.docs}
    assert {"Deployment", "Service", "PodDisruptionBudget"} <= kinds
    problems = []
    for version in kube_versions(kv):
        for manifest in rendered.manifests():
            if manifest["apiVersion"].startswith("monitoring.coreos.com/"):
                continue  # a CRD: no upstream schema; see test_service_monitor
            where = f"{manifest['kind']}/{manifest['metadata']['name']} @ {version}"
            try:
                kv.validate(manifest, version, strict=True)
            except kv.ValidationError as exc:
                problems.append(f"{where}: {'.'.join(str(p) for p in exc.path)}: {exc.message}")
            except kv.SchemaNotFoundError as exc:
                problems.append(f"{where}: {exc.message}")
    assert not problems, "\n".join(problems)


def test_every_resource_is_named_and_labelled(render: Any) -> None:
    for value_set in VALUE_SETS:
        for doc in render(value_set).docs:
            meta = doc["metadata"]
            assert meta["name"].startswith(FULLNAME), meta["name"]
            assert len(meta["name"]) <= 63
            assert meta["labels"]["app.kubernetes.io/instance"] == RELEASE
            assert meta["labels"]["app.kubernetes.io/managed-by"] == "Helm"


def test_schema_rejects_bad_values(chart: Any, helm: ModuleType) -> None:
    chart.validate_schema(chart.merge_values({}))
    bad = [
        {"replicaCount": "two"},
        {"replicasCount": 2},  # typo: unknown keys are rejected
        {"s3": {"pathStyleAccess": "yes"}},
        {"catalog": {"port": 70000}},
        {"ingress": {"hosts": [{"host": "x", "paths": [{"path": "/", "pathType": "Bogus"}]}]}},
        {"podDisruptionBudget": {"maxUnavailable": "half"}},
        {"image": {"pullPolicy": "Sometimes"}},
        {"auth": {"enabled": "yes"}},
        {"auth": {"oidc": {"issuer": "idp.example"}}},  # not a URL
        {"auth": {"clients": {"value": "admin"}}},  # not id:secret
        {"auth": {"tokenSecrets": {"value": "x" * 40}}},  # typo
        {"authorization": {"mode": "deny"}},
        {"authorization": {"cacheSeconds": -1}},
        {
            "authorization": {
                "bootstrap": {"grants": [{"principal": "admin", "privileges": ["admin"], "on": "catalog"}]}
            }
        },
        {"authorization": {"bootstrap": {"grants": [{"principal": "user:a", "privileges": ["all"], "on": "catalog"}]}}},
        {"authorization": {"bootstrap": {"grants": [{"principal": "user:a", "privileges": ["read"]}]}}},
        {"authorization": {"bootstrap": {"grants": [{"principal": "user:a", "privileges": ["read"], "on": "db"}]}}},
        {"warehouse": "./warehouse"},  # relative: would resolve inside the image
        {"warehouse": "s3:/bucket"},
        {"database": {"url": "mysql://u:p@db/catalog"}},
        {"database": {"url": "not a url"}},
        {"dataVolume": {"mountPath": "data"}},
        {"dataVolume": {"source": "pvc"}},
        {"warehouses": {"declared": [{"name": "Team A", "location": "/data/a"}]}},
        {"warehouses": {"declared": [{"name": "team-a"}]}},
        {"warehouses": {"declared": [{"name": "team-a", "location": "/data/a", "s4": {}}]}},
    ]
    for values in bad:
        with pytest.raises(helm.HelmValuesError):
            chart.render(values, name=RELEASE, namespace=NAMESPACE)


def test_inconsistent_values_fail_to_render(chart: Any, helm: ModuleType) -> None:
    for values, reason in (
        ({"s3": {"accessKeyId": "only-the-id"}}, "s3.secretAccessKey is required"),
        ({"autoscaling": {"enabled": True, "minReplicas": 5, "maxReplicas": 2}}, "minReplicas"),
        ({"warehouse": "", "s3": {"bucket": ""}}, "set warehouse or s3.bucket"),
    ):
        with pytest.raises(helm.HelmError) as failure:
            chart.render({**values, "database": {"password": "pw"}}, name=RELEASE, namespace=NAMESPACE)
        assert reason in str(failure.value)


# ---------------------------------------------------------------------------------------------
# Chart: wiring
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_migration_job_is_a_pre_install_and_pre_upgrade_hook(render: Any, value_set: str) -> None:
    rendered = render(value_set)
    job = rendered.maybe("Job")
    if not VALUE_SETS[value_set].get("migration", {}).get("enabled", True):
        assert job is None
        for secret in rendered.of_kind("Secret"):
            assert not hook_annotations(secret)["hooks"], "without the Job the Secret is an ordinary object"
        return
    assert job is not None
    hook = hook_annotations(job)
    assert hook["hooks"] == {"pre-install", "pre-upgrade"}
    assert hook["delete"] == {"before-hook-creation", "hook-succeeded"}
    container = migrate_container(rendered)
    assert container.get("args", []) + container.get("command", []) == ["migrate"]
    assert container["image"] == server_container(rendered)["image"]
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    # Nothing the hook uses may be an ordinary release object: those do not exist yet at pre-install.
    assert "serviceAccountName" not in pod or not rendered.of_kind("ServiceAccount")
    secrets = {s["metadata"]["name"]: s for s in rendered.of_kind("Secret")}
    for entry in container.get("env", []):
        ref = entry.get("valueFrom", {}).get("secretKeyRef")
        if ref and ref["name"] in secrets:
            secret_hook = hook_annotations(secrets[ref["name"]])
            assert secret_hook["hooks"] >= {"pre-install", "pre-upgrade"}, "the Job's Secret must be a hook too"
            assert secret_hook["weight"] < hook["weight"], "the Secret must be created before the Job"
            assert "hook-succeeded" not in secret_hook["delete"], "the Deployment still needs the Secret"


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_probes_hit_health_endpoints_on_the_container_port(render: Any, value_set: str) -> None:
    rendered = render(value_set)
    container = server_container(rendered)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    expected_port = VALUE_SETS[value_set].get("catalog", {}).get("port", PORT)
    assert ports["http"] == expected_port
    env = resolve_env(container, rendered.chart_secrets())
    assert env["CATALOG_PORT"] == str(expected_port)
    assert env["CATALOG_HOST"] == "0.0.0.0"

    def target(probe: dict[str, Any]) -> tuple[str, int]:
        port = probe["httpGet"]["port"]
        return probe["httpGet"]["path"], ports[port] if isinstance(port, str) else port

    assert target(container["livenessProbe"]) == ("/health/live", expected_port)
    assert target(container["readinessProbe"]) == ("/health/ready", expected_port)
    assert target(container["startupProbe"]) == ("/health/live", expected_port)

    service = rendered.one("Service")
    (svc_port,) = service["spec"]["ports"]
    assert svc_port["targetPort"] in ("http", expected_port)
    assert svc_port["port"] == VALUE_SETS[value_set].get("service", {}).get("port", PORT)


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_secrets_feed_the_database_url_and_s3_keys(render: Any, value_set: str) -> None:
    values = VALUE_SETS[value_set]
    db, s3 = values.get("database", {}), values.get("s3", {})
    rendered = render(value_set)
    secrets = rendered.chart_secrets()
    declared = bool(values.get("warehouses", {}).get("declared"))
    assert set(secrets) <= {FULLNAME, *[f"{FULLNAME}-warehouses"] * declared}, (
        "the chart renders at most its own Secret (and the declared warehouses')"
    )
    container = server_container(rendered)
    by_name = {e["name"]: e for e in container["env"]}
    env = resolve_env(container, secrets)

    # Database: never a literal password in the pod spec; always through a Secret.
    url_entry = by_name["CATALOG_DATABASE_URL"]
    if db.get("existingSecret") and db.get("urlKey"):
        assert url_entry["valueFrom"]["secretKeyRef"] == {"name": db["existingSecret"], "key": db["urlKey"]}
    elif db.get("url"):
        assert url_entry["valueFrom"]["secretKeyRef"]["name"] == FULLNAME
        assert env["CATALOG_DATABASE_URL"] == db["url"]
    else:
        password_ref = by_name["DATABASE_PASSWORD"]["valueFrom"]["secretKeyRef"]
        if db.get("existingSecret"):
            assert password_ref == {"name": db["existingSecret"], "key": db.get("passwordKey", "password")}
            password = f"<secret {db['existingSecret']}/{db.get('passwordKey', 'password')}>"
        else:
            assert password_ref["name"] == FULLNAME
            password = db.get("password", "")
        assert "$(DATABASE_PASSWORD)" in url_entry["value"]
        query = "&".join(f"{k}={v}" for k, v in sorted(db.get("params", {}).items()))
        expected = (
            f"postgresql+psycopg://{db.get('user', 'catalog')}:{password}@{db.get('host', 'postgresql')}"
            f":{db.get('port', 5432)}/{db.get('name', 'catalog')}" + (f"?{query}" if query else "")
        )
        assert env["CATALOG_DATABASE_URL"] == expected
    assert "$(" not in env["CATALOG_DATABASE_URL"], "an unresolved $(VAR) reference"

    # S3 keys: from s3.existingSecret, from the chart's Secret, or not at all (default AWS chain).
    if s3.get("existingSecret"):
        assert by_name["CATALOG_S3_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"] == {
            "name": s3["existingSecret"],
            "key": s3["accessKeyIdKey"],
        }
        assert by_name["CATALOG_S3_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {
            "name": s3["existingSecret"],
            "key": s3["secretAccessKeyKey"],
        }
    elif s3.get("accessKeyId"):
        assert env["CATALOG_S3_ACCESS_KEY_ID"] == s3["accessKeyId"]
        assert env["CATALOG_S3_SECRET_ACCESS_KEY"] == s3["secretAccessKey"]
        for name in ("CATALOG_S3_ACCESS_KEY_ID", "CATALOG_S3_SECRET_ACCESS_KEY"):
            assert by_name[name]["valueFrom"]["secretKeyRef"]["name"] == FULLNAME
    else:
        assert "CATALOG_S3_ACCESS_KEY_ID" not in env and "CATALOG_S3_SECRET_ACCESS_KEY" not in env
    for entry in container["env"]:
        if entry["name"] in SECRET_ENV:
            assert "value" not in entry, f"{entry['name']} must come from a Secret"

    # The rest of the storage settings.
    bucket = s3.get("bucket", "warehouse")
    assert env["CATALOG_WAREHOUSE"] == (values.get("warehouse") or f"s3://{bucket}/")
    assert env["CATALOG_S3_PATH_STYLE_ACCESS"] == str(s3.get("pathStyleAccess", False)).lower()
    assert env.get("CATALOG_S3_ENDPOINT") == (s3.get("endpoint") or None)
    assert env["CATALOG_S3_REGION"] == s3.get("region", "us-east-1")

    # The pod rolls when the chart's Secret changes.
    annotations = rendered.one("Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert re.fullmatch(r"[0-9a-f]{64}", annotations["checksum/secret"])


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_every_replica_and_the_migration_share_one_database_url(render: Any, value_set: str) -> None:
    rendered = render(value_set)
    (deployment,) = rendered.of_kind("Deployment")
    assert not rendered.of_kind("StatefulSet"), "replicas must be interchangeable"
    container = server_container(rendered)
    # One pod template: the URL may not depend on anything per pod (downward API, resource fields).
    names = [e["name"] for e in container["env"]]
    assert names.count("CATALOG_DATABASE_URL") == 1
    for entry in container["env"]:
        source = entry.get("valueFrom", {})
        assert "fieldRef" not in source and "resourceFieldRef" not in source, entry
    for entry in container["env"]:
        for ref in K8S_VAR_REF.findall(str(entry.get("value", ""))):
            assert ref in names[: names.index(entry["name"])], f"$({ref}) is used before it is defined"
    assert not deployment["spec"]["template"]["spec"].get("initContainers")
    secrets = rendered.chart_secrets()
    server_url = resolve_env(container, secrets)["CATALOG_DATABASE_URL"]
    if rendered.maybe("Job") is not None:
        assert resolve_env(migrate_container(rendered), secrets)["CATALOG_DATABASE_URL"] == server_url


def test_replicas_and_autoscaler(render: Any) -> None:
    assert render("defaults").one("Deployment")["spec"]["replicas"] == 2
    assert render("defaults").maybe("HorizontalPodAutoscaler") is None
    for value_set in ("hpa", "everything"):
        rendered = render(value_set)
        deployment = rendered.one("Deployment")
        assert "replicas" not in deployment["spec"], "the HPA owns the replica count"
        hpa = rendered.one("HorizontalPodAutoscaler")
        assert hpa["apiVersion"] == "autoscaling/v2"
        assert hpa["spec"]["scaleTargetRef"] == {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": deployment["metadata"]["name"],
        }
        autoscaling = VALUE_SETS[value_set]["autoscaling"]
        assert hpa["spec"]["minReplicas"] == autoscaling["minReplicas"]
        assert hpa["spec"]["maxReplicas"] == autoscaling["maxReplicas"]
        metrics = {m["resource"]["name"]: m["resource"]["target"]["averageUtilization"] for m in hpa["spec"]["metrics"]}
        assert metrics["cpu"] == autoscaling.get("targetCPUUtilizationPercentage", 75)
        if "targetMemoryUtilizationPercentage" in autoscaling:
            assert metrics["memory"] == autoscaling["targetMemoryUtilizationPercentage"]


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_selectors_pick_the_server_pods_only(render: Any, value_set: str) -> None:
    rendered = render(value_set)
    deployment = rendered.one("Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()
    job = rendered.maybe("Job")
    job_labels = job["spec"]["template"]["metadata"]["labels"] if job else {}
    for kind, sel in (
        ("Service", rendered.one("Service")["spec"]["selector"]),
        ("PodDisruptionBudget", rendered.one("PodDisruptionBudget")["spec"]["selector"]["matchLabels"]),
    ):
        assert sel == selector, kind
        assert not (sel.items() <= job_labels.items()), f"the {kind} must not select the migration pod"
    pdb = rendered.one("PodDisruptionBudget")["spec"]
    assert ("minAvailable" in pdb) != ("maxUnavailable" in pdb)


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_pods_run_unprivileged(render: Any, value_set: str) -> None:
    rendered = render(value_set)
    pods = [rendered.one("Deployment")["spec"]["template"]["spec"]]
    if rendered.maybe("Job"):
        pods.append(rendered.one("Job")["spec"]["template"]["spec"])
    for pod in pods:
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] != 0
        assert pod["enableServiceLinks"] is False, "service links would inject CATALOG_PORT=tcp://..."
        for container in pod["containers"]:
            ctx = container["securityContext"]
            assert ctx["readOnlyRootFilesystem"] is True
            assert ctx["allowPrivilegeEscalation"] is False
            assert ctx["capabilities"]["drop"] == ["ALL"]
            mounts = {m["mountPath"] for m in container.get("volumeMounts", [])}
            assert "/tmp" in mounts, "a writable /tmp with a read-only root filesystem"


def test_service_monitor(render: Any) -> None:
    assert render("defaults").maybe("ServiceMonitor") is None
    for value_set in ("service-monitor", "everything"):
        rendered = render(value_set)
        monitor = rendered.one("ServiceMonitor")
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        service = rendered.one("Service")
        assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
        assert monitor["spec"]["namespaceSelector"]["matchNames"] == [NAMESPACE]
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
        assert endpoint["path"] == "/metrics"
        assert re.fullmatch(r"\d+(ms|s|m|h)", endpoint["interval"])
        for key, value in VALUE_SETS[value_set]["serviceMonitor"].get("labels", {}).items():
            assert monitor["metadata"]["labels"][key] == value
        assert set(monitor["spec"]) <= {"selector", "namespaceSelector", "endpoints", "jobLabel"}


def test_ingress_routes_to_the_service(render: Any) -> None:
    assert render("defaults").maybe("Ingress") is None
    rendered = render("ingress")
    ingress = rendered.one("Ingress")
    service = rendered.one("Service")
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"] == [{"secretName": "catalog-tls", "hosts": ["catalog.example.com"]}]
    (rule,) = ingress["spec"]["rules"]
    assert rule["host"] == "catalog.example.com"
    (path,) = rule["http"]["paths"]
    assert path["backend"]["service"] == {
        "name": service["metadata"]["name"],
        "port": {"number": service["spec"]["ports"][0]["port"]},
    }


def test_service_account(render: Any) -> None:
    rendered = render("defaults")
    account = rendered.one("ServiceAccount")
    pod = rendered.one("Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    assert pod["automountServiceAccountToken"] is False
    rendered = render("everything")
    assert rendered.maybe("ServiceAccount") is None
    assert rendered.one("Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "catalog-irsa"
    assert rendered.one("Job")["spec"]["template"]["spec"]["serviceAccountName"] == "catalog-irsa"


def test_notes_tell_clients_how_to_connect(render: Any) -> None:
    uri = f"http://{FULLNAME}.{NAMESPACE}.svc.cluster.local:{PORT}"
    notes = render("defaults").notes
    assert f"spark.sql.catalog.lake.uri={uri}" in notes
    assert f'"uri": "{uri}"' in notes
    assert "spark.sql.catalog.lake.type=rest" in notes
    notes = render("existing-secrets").notes
    assert "spark.sql.catalog.lake.s3.endpoint=http://minio.storage:9000" in notes
    assert "spark.sql.catalog.lake.s3.path-style-access=true" in notes
    assert '"s3.endpoint": "http://minio.storage:9000"' in notes
    assert "Warehouse: s3://lakehouse/" in notes
    assert "catalog.example.com" in render("ingress").notes


def test_storage_access_values_reach_the_server(chart: Any, helm: ModuleType) -> None:
    values = {
        "database": {"password": "pw"},
        "s3": {
            "endpoint": "http://minio.storage:9000",
            "pathStyleAccess": True,
            "clientEndpoint": "https://s3.example.com",
            "clientPathStyleAccess": False,
            "vendCredentials": True,
            "sts": {"roleArn": "arn:aws:iam::123456789012:role/lake-vending", "durationSeconds": 1800},
        },
    }
    rendered = Rendered(chart.render(copy.deepcopy(values), name=RELEASE, namespace=NAMESPACE, is_install=True))
    env = resolve_env(server_container(rendered), rendered.chart_secrets())
    assert env["CATALOG_S3_ENDPOINT"] == "http://minio.storage:9000"
    assert env["CATALOG_S3_CLIENT_ENDPOINT"] == "https://s3.example.com"
    assert env["CATALOG_S3_CLIENT_PATH_STYLE_ACCESS"] == "false"
    assert env["CATALOG_S3_VEND_CREDENTIALS"] == "true"
    assert env["CATALOG_S3_STS_ROLE_ARN"] == "arn:aws:iam::123456789012:role/lake-vending"
    assert env["CATALOG_S3_STS_DURATION_SECONDS"] == "1800" and "CATALOG_S3_STS_ENDPOINT" not in env
    # Clients are told to ask for vended credentials, and no S3 keys or server endpoint.
    assert "X-Iceberg-Access-Delegation=vended-credentials" in rendered.notes
    assert "s3.access-key-id" not in rendered.notes and "minio.storage" not in rendered.notes
    defaults = resolve_env(
        server_container(
            render_defaults := Rendered(
                chart.render({"database": {"password": "pw"}}, name=RELEASE, namespace=NAMESPACE, is_install=True)
            )
        ),
        render_defaults.chart_secrets(),
    )
    assert not {
        "CATALOG_S3_CLIENT_ENDPOINT",
        "CATALOG_S3_CLIENT_PATH_STYLE_ACCESS",
        "CATALOG_S3_VEND_CREDENTIALS",
    } & set(defaults)
    with pytest.raises(helm.HelmError, match="roleArn"):  # vending without a role: the server would refuse
        chart.render(
            {"database": {"password": "pw"}, "s3": {"vendCredentials": True}}, name=RELEASE, namespace=NAMESPACE
        )


def test_append_rebase_value_reaches_the_server(chart: Any) -> None:
    def env(values: dict[str, Any]) -> dict[str, str]:
        rendered = Rendered(chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True))
        return resolve_env(server_container(rendered), rendered.chart_secrets())

    base = {"database": {"password": "pw"}}
    assert env({**base, "catalog": {"appendRebase": True}})["CATALOG_APPEND_REBASE"] == "true"
    assert "CATALOG_APPEND_REBASE" not in env(base)  # off unless asked: the server's default


def test_events_and_tracing_values_reach_the_servers_and_the_maintenance_workers(chart: Any) -> None:
    values = {
        "database": {"password": "pw"},
        "maintenance": {"worker": {"enabled": True}},
        "events": {
            "retention": "12h",
            "webhooks": "audit=https://audit.example/hook",
            "webhookSecret": {"name": "hooks", "key": "hmac"},
            "natsUrl": "nats://nats:4222",
        },
        "tracing": {"otlpEndpoint": "http://otel:4318"},
    }
    rendered = Rendered(chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True))
    for deployment in rendered.of_kind("Deployment"):
        (container,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] != "sidecar"]
        env = resolve_env(container, rendered.chart_secrets())
        assert env["CATALOG_EVENTS_ENABLED"] == "true" and env["CATALOG_EVENTS_RETENTION"] == "12h"
        assert env["CATALOG_EVENTS_WEBHOOKS"] == "audit=https://audit.example/hook"
        assert env["CATALOG_EVENTS_WEBHOOK_SECRET"] == "<secret hooks/hmac>"
        assert env["CATALOG_EVENTS_NATS_URL"] == "nats://nats:4222"
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel:4318"
    default = Rendered(chart.render({"database": {"password": "pw"}}, name=RELEASE, namespace=NAMESPACE))
    env = resolve_env(server_container(default), default.chart_secrets())
    assert env["CATALOG_EVENTS_ENABLED"] == "true"
    assert not {"CATALOG_EVENTS_WEBHOOKS", "CATALOG_EVENTS_WEBHOOK_SECRET", "OTEL_EXPORTER_OTLP_ENDPOINT"} & set(env)


# ---------------------------------------------------------------------------------------------
# Chart: authentication and authorization
# ---------------------------------------------------------------------------------------------

AUTH_VALUE_SETS = sorted(name for name, values in VALUE_SETS.items() if "auth" in values)


def _secret_ref(entry: dict[str, Any]) -> dict[str, str]:
    assert "value" not in entry, f"{entry['name']} must come from a Secret"
    return entry["valueFrom"]["secretKeyRef"]


def test_auth_is_off_by_default(render: Any) -> None:
    rendered = render("defaults")
    env = resolve_env(server_container(rendered), rendered.chart_secrets())
    assert env["CATALOG_AUTH_REQUIRED"] == "false"
    auth_env = {n for n in INTERFACE_ENV if re.match(r"CATALOG_(AUTH|OIDC|OAUTH|TOKEN|METRICS)", n)}
    assert auth_env & set(env) == {"CATALOG_AUTH_REQUIRED"}
    assert not rendered.of_kind("ConfigMap")
    assert "Authentication is off" in rendered.notes


@pytest.mark.parametrize("value_set", AUTH_VALUE_SETS)
def test_auth_values_reach_the_server(render: Any, value_set: str) -> None:
    values = VALUE_SETS[value_set]
    auth, authz = values["auth"], values.get("authorization", {})
    oidc = auth.get("oidc", {})
    rendered = render(value_set)
    secrets = rendered.chart_secrets()
    container = server_container(rendered)
    by_name = {e["name"]: e for e in container["env"]}
    env = resolve_env(container, secrets)

    assert env["CATALOG_AUTH_REQUIRED"] == "true"
    assert env["CATALOG_AUTHORIZATION"] == authz.get("mode", "grants")
    assert float(env["CATALOG_AUTHZ_CACHE_SECONDS"]) == authz.get("cacheSeconds", 5)
    if oidc:
        assert env.get("CATALOG_OIDC_ISSUER") == oidc.get("issuer")
        assert env.get("CATALOG_OIDC_AUDIENCE") == oidc.get("audience")
        assert env.get("CATALOG_OIDC_JWKS_URL") == oidc.get("jwksUrl")
        assert env["CATALOG_OIDC_PRINCIPAL_CLAIM"] == oidc.get("principalClaim", "sub")
        assert env["CATALOG_OIDC_GROUPS_CLAIM"] == oidc.get("groupsClaim", "groups")
        assert env["CATALOG_OIDC_LEEWAY_SECONDS"] == str(oidc.get("leewaySeconds", 60))
    else:
        assert not [name for name in env if name.startswith("CATALOG_OIDC_")]
    if "tokenTtlSeconds" in auth:
        assert env["CATALOG_TOKEN_TTL_SECONDS"] == str(auth["tokenTtlSeconds"])

    # Clients, signing key and metrics token: a secretKeyRef to the user's Secret, or the chart's.
    for name, key, chart_key in (
        ("CATALOG_OAUTH_CLIENTS", "clients", "oauth-clients"),
        ("CATALOG_TOKEN_SECRET", "tokenSecret", "token-secret"),
        ("CATALOG_METRICS_TOKEN", "metricsToken", "metrics-token"),
    ):
        spec = auth.get(key)
        if not spec:
            assert name not in by_name
            continue
        ref = _secret_ref(by_name[name])
        if spec.get("existingSecret"):
            assert ref == {"name": spec["existingSecret"], "key": spec["key"]}
        else:
            assert ref == {"name": FULLNAME, "key": chart_key}
            assert env[name] == spec["value"]
            deployment_text = yaml.safe_dump(rendered.one("Deployment"))
            assert spec["value"] not in deployment_text, f"{key}.value leaked into the Deployment"
    if auth.get("clients"):
        assert "CATALOG_TOKEN_SECRET" in by_name, "built-in clients need the shared signing key"
    if "tokenSecret" in auth and auth["tokenSecret"].get("value"):
        assert len(env["CATALOG_TOKEN_SECRET"].encode()) >= 32

    # The migration needs the database only: no auth settings, no auth secrets.
    job = rendered.maybe("Job")
    if job is not None:
        names = {e["name"] for e in migrate_container(rendered).get("env", [])}
        assert not [n for n in names if "AUTH" in n or "OIDC" in n or "TOKEN" in n or "CLIENTS" in n], names

    notes = rendered.notes
    assert "Authentication is on" in notes
    if auth.get("clients"):
        assert "spark.sql.catalog.lake.credential=<client id>:<client secret>" in notes
        assert f"http://{FULLNAME}.{NAMESPACE}.svc.cluster.local:{PORT}/v1/oauth/tokens" in notes


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_secret_material_is_never_a_plain_env_value(render: Any, value_set: str) -> None:
    rendered = render(value_set)
    containers = [server_container(rendered)]
    if rendered.maybe("Job") is not None:
        containers.append(migrate_container(rendered))
    for container in containers:
        for entry in container.get("env", []):
            if entry["name"] in SECRET_ENV:
                assert set(entry) == {"name", "valueFrom"}, entry
                assert set(entry["valueFrom"]) == {"secretKeyRef"}, entry


def _bootstrap_expected(value_set: str) -> dict[str, Any]:
    bootstrap = VALUE_SETS[value_set]["authorization"]["bootstrap"]
    if isinstance(bootstrap, str):
        bootstrap = yaml.safe_load(bootstrap)
    # YAML 1.1 reads a bare `on:` key as true; the chart writes it back as "on".
    return {"grants": [{("on" if k is True else k): v for k, v in g.items()} for g in bootstrap["grants"]]}


@pytest.mark.parametrize(
    "value_set", [n for n in AUTH_VALUE_SETS if "bootstrap" in VALUE_SETS[n].get("authorization", {})]
)
def test_bootstrap_grants_are_a_mounted_config_map(render: Any, value_set: str) -> None:
    rendered = render(value_set)
    config_map = rendered.one("ConfigMap")
    assert config_map["metadata"]["name"] == f"{FULLNAME}-authz"
    (key,) = config_map["data"]
    grants = yaml.safe_load(config_map["data"][key])
    assert grants == _bootstrap_expected(value_set)
    for grant in grants["grants"]:
        assert re.fullmatch(r"(user|role):.+", grant["principal"])

    deployment = rendered.one("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = server_container(rendered)
    env = resolve_env(container, rendered.chart_secrets())
    (volume,) = [v for v in pod["volumes"] if v.get("configMap", {}).get("name") == config_map["metadata"]["name"]]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    assert mount["readOnly"] is True
    items = {i["key"]: i["path"] for i in volume["configMap"].get("items", [])} or {key: key}
    assert env["CATALOG_AUTHZ_BOOTSTRAP"] == f"{mount['mountPath']}/{items[key]}"

    # A change of the grants rolls the pods.
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert re.fullmatch(r"[0-9a-f]{64}", annotations["checksum/authz-bootstrap"])


def test_the_warehouses_file_is_the_users_secret_mounted_read_only(render: Any) -> None:
    rendered = render("warehouses")
    pod = rendered.one("Deployment")["spec"]["template"]["spec"]
    container = server_container(rendered)
    env = resolve_env(container, rendered.chart_secrets())
    (volume,) = [v for v in pod["volumes"] if v.get("secret", {}).get("secretName") == "lake-warehouses"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    assert mount["readOnly"] is True
    (item,) = volume["secret"]["items"]
    assert item["key"] == "warehouses.yaml"
    assert env["CATALOG_WAREHOUSES_FILE"] == f"{mount['mountPath']}/{item['path']}"
    assert "CATALOG_WAREHOUSES_FILE" not in resolve_env(server_container(render("defaults")), {})


@pytest.mark.parametrize("spec", [{"value": "k" * 44}, {"existingSecret": "lake-keys", "key": "fernet"}])
def test_the_warehouses_secrets_key_reaches_the_servers_and_the_workers_from_a_secret(chart: Any, spec: dict) -> None:
    """warehouses.secretsKey: CATALOG_SECRETS_KEY in every container that opens warehouses (the
    servers and the maintenance workers), through a secretKeyRef, never as a plain value."""
    worker = {"worker": {"enabled": True}}
    values = {"warehouses": {"secretsKey": spec}, "database": {"password": "pw"}, "maintenance": worker}
    rendered = Rendered(chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True))
    secrets = rendered.chart_secrets()
    containers = [
        c for doc in rendered.docs if doc["kind"] == "Deployment" for c in doc["spec"]["template"]["spec"]["containers"]
    ]
    assert len(containers) == 2  # the server's and the maintenance worker's
    for container in containers:
        (env,) = [e for e in container["env"] if e["name"] == "CATALOG_SECRETS_KEY"]
        ref = _secret_ref(env)
        if spec.get("existingSecret"):
            assert ref == {"name": "lake-keys", "key": "fernet"}
        else:
            assert ref == {"name": FULLNAME, "key": "secrets-key"}
            assert secrets[FULLNAME]["secrets-key"] == spec["value"]
    for doc in rendered.docs:
        if doc["kind"] != "Secret" and spec.get("value"):
            assert spec["value"] not in json.dumps(doc), doc["kind"]


def test_declared_warehouses_are_a_secret_of_the_chart_mounted_read_only(
    render: Any, chart: Any, helm: ModuleType, tmp_path: Any
) -> None:
    from catalog.server.warehouses import read_file
    from catalog.settings import Settings
    from catalog.warehouse_profiles import parse

    declared = VALUE_SETS["warehouses-declared"]["warehouses"]["declared"]
    rendered = render("warehouses-declared")
    pod = rendered.one("Deployment")["spec"]["template"]["spec"]
    container = server_container(rendered)
    secrets = rendered.chart_secrets()
    (volume,) = [v for v in pod["volumes"] if v["name"] == "warehouses"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "warehouses"]
    assert mount["readOnly"] is True
    (item,) = volume["secret"]["items"]
    assert resolve_env(container, secrets)["CATALOG_WAREHOUSES_FILE"] == f"{mount['mountPath']}/{item['path']}"
    assert volume["secret"]["secretName"] == f"{FULLNAME}-warehouses"
    content = secrets[volume["secret"]["secretName"]][item["key"]]

    # The server reads what the pods get as the warehouses that were declared.
    path = tmp_path / "warehouses.yaml"
    path.write_text(content)
    settings = Settings(_env_file=None, database_url=f"sqlite:///{tmp_path / 'c.db'}", warehouse=str(tmp_path / "w"))
    assert [parse(i, settings) for i in read_file(str(path), settings)] == [parse(i, settings) for i in declared]
    assert "max-snapshot-age-ms: 86400000" in content, "integers stay integers"
    # The keys are in Secrets only: in no ConfigMap, env value or other manifest.
    for doc in rendered.docs:
        if doc["kind"] != "Secret":
            text = json.dumps(doc)
            assert "team-a-secret-access-key" not in text and "dGVhbS1iLWFjY291bnQta2V5" not in text, doc["kind"]

    def checksum(name: str) -> str:
        values = {"warehouses": {"declared": [{"name": name, "location": "/data/x"}]}, "database": {"password": "pw"}}
        files = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
        deployment = Rendered(files).one("Deployment")
        return deployment["spec"]["template"]["metadata"]["annotations"]["checksum/warehouses"]

    assert checksum("team-a") == checksum("team-a") != checksum("team-b"), "a change rolls the pods"
    both = {"existingSecret": "mine", "declared": declared}
    with pytest.raises(helm.HelmError, match="not both"):
        chart.render({"warehouses": both, "database": {"password": "pw"}}, name=RELEASE, namespace=NAMESPACE)
    assert not [d for d in render("warehouses").docs if d["metadata"]["name"].endswith("-warehouses")]


def test_changing_bootstrap_grants_rolls_the_pods(chart: Any) -> None:
    def checksum(grants: list[dict[str, Any]]) -> str:
        values = {"authorization": {"bootstrap": {"grants": grants}}, "database": {"password": "pw"}}
        files = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
        deployment = Rendered(files).one("Deployment")
        return deployment["spec"]["template"]["metadata"]["annotations"]["checksum/authz-bootstrap"]

    one = [{"principal": "user:a", "privileges": ["read"], "on": "catalog"}]
    two = [{"principal": "user:a", "privileges": ["read", "write"], "on": "catalog"}]
    assert checksum(one) == checksum(copy.deepcopy(one))
    assert checksum(one) != checksum(two)


def test_bootstrap_from_a_values_file_with_a_bare_on_key(chart: Any, helm: ModuleType) -> None:
    """Users write the plan's format (`on: catalog`) in their values file; Helm's YAML 1.1 reads `true`."""
    values = helm.values_from_yaml(
        "auth: {enabled: true, oidc: {issuer: 'https://idp.example'}}\n"
        "database: {password: pw}\n"
        "authorization:\n"
        "  bootstrap:\n"
        "    grants:\n"
        "      - principal: role:analysts\n"
        "        privileges: [read]\n"
        "        on: {namespace: analytics}\n"
    )
    rendered = Rendered(chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True))
    grants = yaml.safe_load(next(iter(rendered.one("ConfigMap")["data"].values())))
    assert grants == {
        "grants": [{"principal": "role:analysts", "privileges": ["read"], "on": {"namespace": "analytics"}}]
    }


@pytest.mark.parametrize("value_set", [n for n in AUTH_VALUE_SETS if VALUE_SETS[n].get("serviceMonitor")])
def test_service_monitor_sends_the_metrics_token(render: Any, value_set: str) -> None:
    rendered = render(value_set)
    (endpoint,) = rendered.one("ServiceMonitor")["spec"]["endpoints"]
    env_ref = _secret_ref({e["name"]: e for e in server_container(rendered)["env"]}["CATALOG_METRICS_TOKEN"])
    assert endpoint["bearerTokenSecret"] == env_ref
    # Without a metrics token, /metrics is open and the monitor sends nothing.
    (plain,) = render("service-monitor").one("ServiceMonitor")["spec"]["endpoints"]
    assert "bearerTokenSecret" not in plain


@pytest.mark.parametrize(
    ("values", "reason"),
    [
        ({"auth": {"enabled": True}}, "no client could obtain a token"),
        ({"auth": {"enabled": True, "oidc": {"audience": "x"}}}, "no client could obtain a token"),
        # Built-in clients without a shared signing key: whatever the replica count.
        ({"auth": {"enabled": True, "clients": {"value": "a:b"}}}, "each of the 2 replicas"),
        ({"replicaCount": 1, "auth": {"enabled": True, "clients": {"value": "a:b"}}}, "auth.tokenSecret"),
        (
            {"autoscaling": {"enabled": True}, "auth": {"enabled": True, "clients": {"existingSecret": "c"}}},
            "autoscaled pods",
        ),
        ({"auth": {"clients": {"value": "a:b"}}}, "auth.tokenSecret"),  # even before auth is enforced
        (
            {"auth": {"enabled": True, "clients": {"value": "a:b"}, "tokenSecret": {"value": "too-short"}}},
            "at least 32 bytes",
        ),
        (
            {"auth": {"metricsToken": {"value": "m"}}, "serviceMonitor": {"enabled": True, "namespace": "monitoring"}},
            "bearerTokenSecret",
        ),
        ({"authorization": {"bootstrap": "- not a mapping"}}, "not a YAML mapping"),
        ({"authorization": {"bootstrap": "rules: []"}}, "grants"),
        (
            {"authorization": {"bootstrap": "grants:\n- {principal: bob, privileges: [read], on: catalog}"}},
            "user:<name>",
        ),
        ({"authorization": {"bootstrap": "grants:\n- {principal: user:b, privileges: [reed], on: catalog}"}}, "reed"),
        ({"authorization": {"bootstrap": "grants:\n- {principal: user:b, privileges: [read], on: {db: x}}"}}, "on"),
    ],
)
def test_unworkable_auth_values_fail_to_render(
    chart: Any, helm: ModuleType, values: dict[str, Any], reason: str
) -> None:
    with pytest.raises(helm.HelmError) as failure:
        chart.render({"database": {"password": "pw"}, **values}, name=RELEASE, namespace=NAMESPACE)
    assert reason in str(failure.value)


LOCAL = {
    "replicaCount": 1,
    "migration": {"enabled": False},
    "dataVolume": {"source": {"persistentVolumeClaim": {"claimName": "lake"}}},
}


@pytest.mark.parametrize(
    ("values", "reason"),
    [
        # The chart builds postgresql+psycopg://catalog:$(DATABASE_PASSWORD)@postgresql/catalog: not with "".
        ({"database": {"host": "postgresql"}}, "database.password is empty"),  # {} is the embedded default
        ({"database": {"host": "pg", "password": ""}}, "PostgreSQL refuses an empty one"),
        # A local warehouse or SQLite shared by several pods: each has its own.
        ({"database": {"password": "pw"}, "warehouse": "/data/lake"}, "local directory but 2 replicas"),
        (
            {"database": {"password": "pw"}, "warehouse": "file:///data/lake", "autoscaling": {"enabled": True}},
            "up to 10 autoscaled pods",
        ),
        ({**LOCAL, "replicaCount": 2, "database": {"url": "sqlite:////var/lib/iceberg-catalog/c.db"}}, "SQLite"),
        ({**LOCAL, "autoscaling": {"enabled": True}, "database": {"url": "sqlite:///c.db"}}, "use PostgreSQL"),
        # SQLite with the migration Job: the Job would migrate a file in its own pod.
        ({**LOCAL, "migration": {"enabled": True}, "database": {"url": "sqlite:///catalog.db"}}, "migration Job"),
        # Local data on the read-only root filesystem, or on no volume at all.
        (
            {"replicaCount": 1, "database": {"password": "pw"}, "warehouse": "/var/lib/iceberg-catalog/w"},
            "read-only root filesystem",
        ),
        (
            {**LOCAL, "database": {"password": "pw"}, "warehouse": "/elsewhere/w"},
            "readOnlyRootFilesystem=true",
        ),
        (
            {**LOCAL, "database": {"url": "sqlite:////tmp/catalog.db"}, "warehouse": "s3://b/"},
            "the SQLite file of database.url (/tmp/catalog.db)",
        ),
        (
            {
                "replicaCount": 1,
                "database": {"password": "pw"},
                "warehouse": "/var/lib/iceberg-catalog/w",
                "securityContext": {"readOnlyRootFilesystem": False},
            },
            "lost whenever the pod is replaced",
        ),
    ],
)
def test_unworkable_storage_values_fail_to_render(
    chart: Any, helm: ModuleType, values: dict[str, Any], reason: str
) -> None:
    with pytest.raises(helm.HelmError) as failure:
        chart.render(values, name=RELEASE, namespace=NAMESPACE)
    assert reason in str(failure.value)


def test_local_data_is_one_pod_on_its_volume(render: Any, chart: Any) -> None:
    rendered = render("single-pod-local")
    deployment = rendered.one("Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}, "a surge pod would share the local data"
    assert rendered.maybe("Job") is None and rendered.maybe("HorizontalPodAutoscaler") is None
    pod = deployment["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "data"]
    assert volume["persistentVolumeClaim"] == {"claimName": "lake"}
    container = server_container(rendered)
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "data"]
    env = resolve_env(container, rendered.chart_secrets())
    assert env["CATALOG_WAREHOUSE"].startswith(mount["mountPath"] + "/")
    assert env["CATALOG_DATABASE_URL"].removeprefix("sqlite:///").startswith(mount["mountPath"] + "/")
    # Pods sharing nothing local keep rolling updates.
    assert render("defaults").one("Deployment")["spec"]["strategy"]["type"] == "RollingUpdate"
    # The chart README's example: a relative SQLite path lands in the working directory, the mount.
    example = {**LOCAL, "database": {"url": "sqlite:///catalog.db"}, "warehouse": "/var/lib/iceberg-catalog/warehouse"}
    assert Rendered(chart.render(example, name=RELEASE, namespace=NAMESPACE)).one("Deployment")


def test_readme_documents_every_value() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    readme = (CHART / "README.md").read_text()
    readme = readme.split("\n## Values\n", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\|\s*`([A-Za-z0-9_.]+)`\s*\|", readme, flags=re.MULTILINE))

    def leaves(tree: dict[str, Any], prefix: str = "") -> Iterator[str]:
        for key, value in tree.items():
            if isinstance(value, dict) and value:
                yield from leaves(value, f"{prefix}{key}.")
            else:
                yield f"{prefix}{key}"

    def covered(key: str) -> bool:
        parts = key.split(".")
        return any(".".join(parts[:i]) in documented for i in range(1, len(parts) + 1))

    missing = [key for key in leaves(values) if not covered(key)]
    assert not missing, f"values missing from the README table: {missing}"
    schema = json.loads((CHART / "values.schema.json").read_text())
    stale = [key for key in documented if key.split(".")[0] not in values]
    assert not stale, f"README documents values that do not exist: {stale}"
    assert set(values) <= set(schema["properties"]), "every top-level value is in values.schema.json"


def test_chart_uses_only_known_catalog_variables(render: Any) -> None:
    allowed = allowed_catalog_env()
    used: dict[str, set[str]] = {}
    for value_set in VALUE_SETS:
        rendered = render(value_set)
        for doc in rendered.docs:
            for name in CATALOG_VAR.findall(yaml.safe_dump(doc)):
                used.setdefault(name, set()).add(f"{value_set}:{doc['kind']}")
    for path in sorted(CHART.rglob("*")):
        if path.is_file() and path.suffix in {".yaml", ".tpl", ".txt", ".md", ".json"}:
            for name in CATALOG_VAR.findall(path.read_text()):
                used.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    unknown = {name: sorted(where) for name, where in used.items() if name not in allowed}
    assert not unknown, f"CATALOG_* names the server does not read: {unknown}"
    # The chart sets the whole interface somewhere across the value sets.
    assert set(used) >= INTERFACE_ENV, sorted(INTERFACE_ENV - set(used))


# ---------------------------------------------------------------------------------------------
# compose.yaml
# ---------------------------------------------------------------------------------------------

_INTERPOLATION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}")


def _interpolate(value: Any) -> Any:
    """Compose-style ${VAR:-default} with an empty environment (what `docker compose` does by default)."""
    if isinstance(value, str):
        return _INTERPOLATION.sub(lambda m: m.group(2) or "", value).replace("$$", "$")
    if isinstance(value, list):
        return [_interpolate(v) for v in value]
    if isinstance(value, dict):
        return {k: _interpolate(v) for k, v in value.items()}
    return value


def _environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def _depends_on(service: dict[str, Any]) -> dict[str, str]:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return {d: "service_started" for d in deps}
    return {name: spec.get("condition", "service_started") for name, spec in deps.items()}


def _command(service: dict[str, Any]) -> list[str]:
    cmd = service.get("command") or []
    return cmd.split() if isinstance(cmd, str) else list(cmd)


@pytest.fixture(scope="module")
def compose_raw() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def compose_model(compose_raw: dict[str, Any]) -> dict[str, Any]:
    return _interpolate(compose_raw)


def test_compose_matches_the_compose_specification(compose_raw: dict[str, Any], compose_schema: dict[str, Any]) -> None:
    import jsonschema

    validator = jsonschema.Draft202012Validator(compose_schema)
    errors = sorted(validator.iter_errors(compose_raw), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors)


def test_compose_services_are_wired(compose_model: dict[str, Any]) -> None:
    services = compose_model["services"]
    assert {"postgres", "minio", "minio-init", "catalog-migrate", "catalog", "spark"} <= set(services)

    postgres = services["postgres"]
    assert postgres["image"].startswith("postgres:16")
    assert postgres["healthcheck"]["test"]
    minio = services["minio"]
    assert minio["image"].startswith("minio/minio")
    assert minio["healthcheck"]["test"]

    init = services["minio-init"]
    assert init["image"].startswith("minio/mc")
    assert _depends_on(init) == {"minio": "service_healthy"}
    init_script = " ".join(_command(init))
    assert re.search(r"mc mb\b.*\blocal/warehouse\b", init_script), init_script

    migrate, catalog = services["catalog-migrate"], services["catalog"]
    for service in (migrate, catalog):
        assert service["build"] in (".", {"context": "."})
    assert migrate.get("image") == catalog.get("image")
    assert _command(migrate) == ["migrate"]
    assert _command(catalog) in ([], ["serve"])
    assert migrate.get("restart", "no") == "no"
    assert _depends_on(migrate) == {"postgres": "service_healthy"}
    assert _depends_on(catalog) == {
        "postgres": "service_healthy",
        "catalog-migrate": "service_completed_successfully",
        "minio-init": "service_completed_successfully",
        "azurite-init": "service_completed_successfully",
    }
    assert any(str(p).split(":")[-1] == "8181" for p in catalog["ports"])
    assert "/health/ready" in " ".join(catalog["healthcheck"]["test"])

    env, migrate_env = _environment(catalog), _environment(migrate)
    assert migrate_env["CATALOG_DATABASE_URL"] == env["CATALOG_DATABASE_URL"]
    pg = _environment(postgres)
    assert env["CATALOG_DATABASE_URL"] == (
        f"postgresql+psycopg://{pg['POSTGRES_USER']}:{pg['POSTGRES_PASSWORD']}@postgres:5432/{pg['POSTGRES_DB']}"
    )
    bucket = re.fullmatch(r"s3://([^/]+)/.*", env["CATALOG_WAREHOUSE"]).group(1)
    assert f"local/{bucket}" in init_script, "minio-init creates the warehouse bucket"
    assert env["CATALOG_S3_ENDPOINT"] == "http://minio:9000"
    assert env["CATALOG_S3_PATH_STYLE_ACCESS"] == "true"
    # The catalog uses its own MinIO user (not root), which minio-init creates with the bucket's policy.
    init_env = _environment(services["minio-init"])
    assert env["CATALOG_S3_ACCESS_KEY_ID"] == init_env["MINIO_CATALOG_USER"]
    assert init_env["MINIO_CATALOG_USER"] != _environment(minio)["MINIO_ROOT_USER"]
    assert env["CATALOG_S3_SECRET_ACCESS_KEY"] == init_env["MINIO_CATALOG_PASSWORD"]
    assert "mc admin user add local" in init_script
    assert "mc admin policy attach local catalog-warehouse --user" in init_script
    # Clients on the host are told the host's MinIO port; table-scoped credentials are vended.
    assert env["CATALOG_S3_CLIENT_ENDPOINT"] == "http://localhost:9000"
    assert env["CATALOG_S3_VEND_CREDENTIALS"] == "true" and env["CATALOG_S3_STS_ROLE_ARN"]
    assert env.get("CATALOG_HOST", "0.0.0.0") == "0.0.0.0"

    for name, service in services.items():
        assert ("profiles" in service) == (name == "spark"), f"{name}: only spark is optional"

    spark = services["spark"]
    assert spark["profiles"] == ["spark"]
    assert _depends_on(spark) == {"catalog": "service_healthy"}
    (config_ref,) = spark["configs"]
    conf_text = compose_model["configs"][config_ref["source"]]["content"]
    conf = dict(line.split(None, 1) for line in conf_text.splitlines() if line.strip())
    assert conf["spark.sql.catalog.lake"] == "org.apache.iceberg.spark.SparkCatalog"
    assert conf["spark.sql.catalog.lake.type"] == "rest"
    assert conf["spark.sql.catalog.lake.uri"] == "http://catalog:8181"
    assert conf["spark.sql.catalog.lake.io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"
    # No S3 settings of its own: in MinIO's network namespace the advertised localhost:9000 is MinIO,
    # and it asks for vended credentials.
    assert spark["network_mode"] == "service:minio"
    assert not any(key.startswith("spark.sql.catalog.lake.s3.") for key in conf)
    assert conf["spark.sql.catalog.lake.header.X-Iceberg-Access-Delegation"] == "vended-credentials"
    assert "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions" in conf["spark.sql.extensions"]
    assert config_ref["target"].endswith("/spark-defaults.conf")
    # A one-shot job (a script, no restart policy): the README must say so, and how to run it.
    assert spark["command"][:2] == ["/opt/spark/bin/spark-sql", "-e"] and "restart" not in spark
    readme = (ROOT / "README.md").read_text()
    assert "docker compose --profile spark run --rm spark" in readme and "one-shot" in readme
    assert "--profile spark up" not in readme, "`up` suggests a long-running Spark container; it exits"


def test_compose_runs_with_auth(compose_raw: dict[str, Any], compose_model: dict[str, Any]) -> None:
    import jsonschema

    services = compose_model["services"]
    catalog, migrate = services["catalog"], services["catalog-migrate"]
    env = _environment(catalog)
    assert env["CATALOG_AUTH_REQUIRED"] == "true"
    assert env.get("CATALOG_AUTHORIZATION", "grants") == "grants"
    clients = dict(item.split(":", 1) for item in env["CATALOG_OAUTH_CLIENTS"].split(","))
    assert {"admin", "spark"} <= set(clients) and all(clients.values())
    assert len(env["CATALOG_TOKEN_SECRET"].encode()) >= 32, "HS256 key of at least 32 bytes"
    # Local defaults only: every secret can be overridden from the environment / .env.
    raw_env = _environment(compose_raw["services"]["catalog"])
    for name in ("CATALOG_OAUTH_CLIENTS", "CATALOG_TOKEN_SECRET"):
        assert "${" in raw_env[name], f"{name} must be overridable"
    assert not [n for n in _environment(migrate) if re.match(r"CATALOG_(AUTH|OIDC|OAUTH|TOKEN|METRICS)", n)]

    # The bootstrap policy: a read-only bind mount of a file in the repository, in the chart's format.
    path = env["CATALOG_AUTHZ_BOOTSTRAP"]
    (mount,) = [v for v in catalog["volumes"] if isinstance(v, dict) and v["target"] == path]
    assert mount["type"] == "bind" and mount["read_only"] is True
    policy_file = (COMPOSE.parent / mount["source"]).resolve()
    assert policy_file.is_file() and policy_file.is_relative_to(ROOT)
    policy = yaml.safe_load(policy_file.read_text())
    assert all(True not in grant for grant in policy["grants"]), 'quote "on" (YAML 1.1 reads on: as true)'
    chart_schema = json.loads((CHART / "values.schema.json").read_text())
    (grants_schema,) = [
        s
        for s in chart_schema["properties"]["authorization"]["properties"]["bootstrap"]["oneOf"]
        if s.get("type") == "object"
    ]
    jsonschema.Draft7Validator(grants_schema).validate(policy)
    holders = {g["principal"] for g in policy["grants"]}
    assert holders <= {f"client:{client}" for client in clients}, "grants name the configured clients"
    assert {"principal": "client:admin", "privileges": ["admin"], "on": "catalog"} in policy["grants"]
    spark_grants = [g for g in policy["grants"] if g["principal"] == "client:spark"]
    assert any(g["on"] == {"namespace": "demo"} and {"write", "create"} <= set(g["privileges"]) for g in spark_grants)
    assert "admin" not in {p for g in spark_grants for p in g["privileges"]}, "spark is not an admin"

    # Spark authenticates as the spark client, at the catalog's token endpoint.
    spark = services["spark"]
    (config_ref,) = spark["configs"]
    conf_text = compose_model["configs"][config_ref["source"]]["content"]
    conf = dict(line.split(None, 1) for line in conf_text.splitlines() if line.strip())
    assert conf["spark.sql.catalog.lake.credential"] == f"spark:{clients['spark']}"
    assert conf["spark.sql.catalog.lake.oauth2-server-uri"] == f"{conf['spark.sql.catalog.lake.uri']}/v1/oauth/tokens"
    assert "lake.demo" in " ".join(_command(spark)), "the smoke test stays inside the namespace spark may use"


def _compose_warehouses(compose_raw: dict[str, Any], compose_model: dict[str, Any], tmp_path: Any) -> tuple:
    """The catalog's warehouses file as the container gets it (the config mounted at
    CATALOG_WAREHOUSES_FILE, interpolated), read by the server's own reader with the server's settings
    from the catalog's environment: (settings, {name: Warehouse}, the raw content)."""
    from catalog.server.warehouses import read_file
    from catalog.settings import Settings
    from catalog.warehouse_profiles import parse

    catalog = compose_model["services"]["catalog"]
    env = _environment(catalog)
    (ref,) = [c for c in catalog["configs"] if c["target"] == env["CATALOG_WAREHOUSES_FILE"]]
    declared = tmp_path / "warehouses.yaml"
    declared.write_text(compose_model["configs"][ref["source"]]["content"])
    settings = Settings(_env_file=None, **{k.removeprefix("CATALOG_").lower(): v for k, v in env.items()})
    items = read_file(str(declared), settings)  # ValueError naming the problem, as `serve` would refuse it
    warehouses = {w.name: w for w in (parse(item, settings) for item in items)}
    return settings, warehouses, compose_raw["configs"][ref["source"]]["content"]


def test_compose_serves_two_teams_warehouses(
    compose_raw: dict[str, Any], compose_model: dict[str, Any], tmp_path: Any
) -> None:
    from catalog.server.warehouses import checked_settings
    from catalog.storage.azure import account_of

    services = compose_model["services"]
    settings, warehouses, raw = _compose_warehouses(compose_raw, compose_model, tmp_path)
    assert set(warehouses) == {"team-a", "team-b"}
    # What the server checks before it opens a warehouse (it would refuse to start otherwise).
    a = checked_settings(settings, warehouses["team-a"], 1).storage
    b = checked_settings(settings, warehouses["team-b"], 2).storage
    for secret in ("MINIO_TEAM_A_PASSWORD", "AZURITE_ACCOUNT_KEY"):
        assert "${" + secret + ":-" in raw, f"{secret} must be overridable"

    # team-a: a MinIO bucket of its own, reached with a MinIO user of its own allowed that bucket only.
    assert a.storage_kind == "s3" and a.warehouse.startswith("s3://team-a/")
    assert a.s3_endpoint == settings.storage.s3_endpoint == "http://minio:9000"
    assert a.s3_client_endpoint == "http://localhost:9000" and a.s3_path_style_access
    assert a.s3_vend_credentials and a.s3_sts_role_arn
    init = services["minio-init"]
    init_env, script = _environment(init), " ".join(_command(init))
    assert "mc mb --ignore-existing local/team-a" in script
    assert (a.s3_access_key_id, a.s3_secret_access_key) == (
        init_env["MINIO_TEAM_A_USER"],
        init_env["MINIO_TEAM_A_PASSWORD"],
    )
    assert a.s3_access_key_id not in (
        settings.storage.s3_access_key_id,
        _environment(services["minio"])["MINIO_ROOT_USER"],
    )
    policy = json.loads(re.search(r"printf '%s' '(\{[^']*team-a[^']*\})' > /tmp/team-a.json", script).group(1))
    assert policy["Statement"][0]["Resource"] == ["arn:aws:s3:::team-a", "arn:aws:s3:::team-a/*"]
    raw_script = " ".join(_command(compose_raw["services"]["minio-init"]))  # $$: the shell's variables
    assert 'mc admin user add local "$${MINIO_TEAM_A_USER}" "$${MINIO_TEAM_A_PASSWORD}"' in raw_script
    assert 'mc admin policy attach local team-a-warehouse --user "$${MINIO_TEAM_A_USER}"' in raw_script

    # team-b: a container in Azurite, made by azurite-init before the catalog starts.
    assert b.storage_kind == "azure"
    account, _, container = account_of(b)
    azurite, azurite_init = services["azurite"], services["azurite-init"]
    assert azurite["image"].startswith("mcr.microsoft.com/azure-storage/azurite:")
    command = _command(azurite)
    port = command[command.index("--blobPort") + 1]
    assert command[0] == "azurite-blob" and command[command.index("--blobHost") + 1] == "0.0.0.0"
    assert b.azure_blob_endpoint == f"http://azurite:{port}/{account}"
    assert b.azure_client_blob_endpoint == f"http://localhost:{port}/{account}"
    assert f"{port}:{port}" in [str(p).split()[0] for p in azurite["ports"]]
    assert b.azure_vend_credentials and b.azure_sas_scope == "container", "Azurite has no hierarchical namespace"
    init_env = _environment(azurite_init)
    assert (init_env["AZURITE_BLOB_ENDPOINT"], init_env["AZURITE_ACCOUNT_KEY"]) == (
        b.azure_blob_endpoint,
        b.azure_account_key,
    )
    assert f'create_container("{container}")' in azurite_init["command"][0]
    assert azurite_init["image"] == services["catalog"]["image"], "the catalog image brings the Azure SDK"
    assert _depends_on(azurite_init) == {"azurite": "service_started"}
    assert "azurite-data" in compose_model["volumes"]


@pytest.mark.azure
def test_compose_azurite_init_makes_team_b_s_container(compose_model: dict[str, Any], azurite: Any) -> None:
    """azurite-init's script, run against a real Azurite: the container is made, and a second run
    (a restart of the stack) still exits 0."""
    init = compose_model["services"]["azurite-init"]
    script = init["command"][0]
    container = re.search(r'create_container\("([^"]+)"\)', script).group(1)
    env = {**os.environ, **_environment(init), "AZURITE_BLOB_ENDPOINT": azurite.endpoint}
    for _ in range(2):
        subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=60)
    assert azurite.service().get_container_client(container).exists()


def test_compose_uses_only_known_catalog_variables(compose_raw: dict[str, Any]) -> None:
    allowed = allowed_catalog_env()
    names = set(CATALOG_VAR.findall(COMPOSE.read_text()))
    unknown = sorted(names - allowed)
    assert not unknown, f"compose.yaml uses CATALOG_* names the server does not read: {unknown}"
    for name, service in compose_raw["services"].items():
        env = _environment(service)
        assert not [k for k in env if k.startswith("CATALOG_") and k not in allowed], name


# ---------------------------------------------------------------------------------------------
# Dockerfile
# ---------------------------------------------------------------------------------------------


def _dockerfile_instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    text = re.sub(r"\\\n", " ", "\n".join(lines))
    out = []
    for line in text.splitlines():
        if line.strip():
            keyword, _, rest = line.strip().partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def _dockerignored(path: str, patterns: list[str]) -> bool:
    """.dockerignore semantics, simplified: the last matching pattern wins; a matching parent excludes."""
    excluded = False
    for raw in patterns:
        negate = raw.startswith("!")
        pattern = raw.lstrip("!").rstrip("/")
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatchcase(p, pattern) or fnmatch.fnmatchcase(p, pattern.replace("**/", "")) for p in prefixes):
            excluded = not negate
    return excluded


def test_dockerfile() -> None:
    instructions = _dockerfile_instructions()
    froms = [rest for kw, rest in instructions if kw == "FROM"]
    args = dict(rest.split("=", 1) for kw, rest in instructions if kw == "ARG" and "=" in rest)
    final_stage = instructions[max(i for i, (kw, _) in enumerate(instructions) if kw == "FROM") :]
    base = froms[-1].split()[0]
    base = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), ""), base)
    assert base == "python:3.11-slim"

    def last(keyword: str) -> str:
        values = [rest for kw, rest in final_stage if kw == keyword]
        assert values, f"no {keyword} in the final stage"
        return values[-1]

    user = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), ""), last("USER")).split(":")[0]
    assert user not in ("", "0", "root"), "the image runs as a non-root user"
    assert "8181" in last("EXPOSE").split()
    assert "CATALOG_HOST=0.0.0.0" in " ".join(rest for kw, rest in final_stage if kw == "ENV")
    assert json.loads(last("ENTRYPOINT")) == ["iceberg-catalog"]
    assert json.loads(last("CMD")) == ["serve"]
    assert "/health/live" in last("HEALTHCHECK")

    copied = " ".join(rest for kw, rest in instructions if kw == "COPY" and "--from" not in rest)
    for source in ("pyproject.toml", "catalog/", "alembic/", "alembic.ini"):
        assert source in copied.split(), f"COPY {source}"
    lines = DOCKERIGNORE.read_text().splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    for kept in ("pyproject.toml", "alembic.ini", "catalog/__init__.py", "catalog/api/tables.py", "alembic/env.py"):
        assert not _dockerignored(kept, patterns), f".dockerignore excludes {kept}"
    for dropped in (".git/HEAD", "tests/support.py", "catalog/__pycache__/x.pyc", "catalog.db", ".venv/bin/python"):
        assert _dockerignored(dropped, patterns), f".dockerignore keeps {dropped}"


class _Health(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:  # noqa: N802
        self.send_response(self.status if self.path == "/health/live" else 404)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_dockerfile_healthcheck_command_works() -> None:
    """Run the image's HEALTHCHECK command (with this interpreter) against a stand-in server."""
    healthcheck = [rest for kw, rest in _dockerfile_instructions() if kw == "HEALTHCHECK"][-1]
    command = json.loads(healthcheck[healthcheck.index("CMD") + 3 :].strip())
    assert command[0] == "python"
    command[0] = sys.executable

    def run(port: int) -> int:
        env = {**os.environ, "CATALOG_PORT": str(port)}
        return subprocess.run(command, env=env, capture_output=True, timeout=30).returncode

    for status, healthy in ((200, True), (503, False)):
        handler = type("Handler", (_Health,), {"status": status})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            assert (run(server.server_address[1]) == 0) is healthy
        finally:
            server.shutdown()
            server.server_close()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        unused_port = probe.getsockname()[1]
    assert run(unused_port) != 0, "no server: unhealthy"


def test_a_maintenance_worker_deployment_takes_table_care_off_the_servers(chart: Any, kv: ModuleType) -> None:
    values = {"database": {"password": "pw"}, "maintenance": {"worker": {"enabled": True, "replicas": 2}}}
    rendered = Rendered(chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True))
    deployments = {d["metadata"]["labels"]["app.kubernetes.io/component"]: d for d in rendered.of_kind("Deployment")}
    assert set(deployments) == {"server", "maintenance"}
    server_pod = deployments["server"]["spec"]["template"]["spec"]
    (server,) = [c for c in server_pod["containers"] if c["name"] == "catalog"]
    assert resolve_env(server, rendered.chart_secrets())["CATALOG_MAINTENANCE_WORKERS"] == "0"
    worker_spec = deployments["maintenance"]["spec"]
    (worker,) = worker_spec["template"]["spec"]["containers"]
    assert worker["args"] == ["maintenance", "worker"] and worker_spec["replicas"] == 2
    env = resolve_env(worker, rendered.chart_secrets())
    assert env["CATALOG_MAINTENANCE_WORKERS"] == "2" and env["CATALOG_DATABASE_URL"].startswith("postgresql")
    assert env["CATALOG_DROP_RETENTION"] == "7d"  # configured alike: one queue, one catalog
    assert worker_spec["selector"]["matchLabels"]["app.kubernetes.io/component"] == "maintenance"
    for version in kube_versions(kv):
        kv.validate({k: v for k, v in deployments["maintenance"].items() if k != "__file__"}, version, strict=True)
    # by default the servers run it themselves
    default = Rendered(chart.render({"database": {"password": "pw"}}, name=RELEASE, namespace=NAMESPACE))
    server_env = resolve_env(server_container(default), default.chart_secrets())
    assert server_env["CATALOG_MAINTENANCE_WORKERS"] == "1" and server_env["CATALOG_DROP_RETENTION"] == "7d"


def test_a_maintenance_worker_with_sqlite_is_refused(chart: Any, helm: ModuleType) -> None:
    values = {**LOCAL, "database": {"url": "sqlite:///catalog.db"}, "maintenance": {"worker": {"enabled": True}}}
    with pytest.raises(helm.HelmError, match="maintenance.worker.enabled needs PostgreSQL"):
        chart.render(values, name=RELEASE, namespace=NAMESPACE)


def test_azure_and_gcs_values_become_their_settings(render: Any) -> None:
    """The cloud storage values land in the server's environment; the Azure key only by secretKeyRef."""
    azure = render("azure")
    env = resolve_env(server_container(azure), azure.chart_secrets())
    assert env["CATALOG_WAREHOUSE"] == "abfss://lake@acct.dfs.core.windows.net/wh"
    assert env["CATALOG_AZURE_ACCOUNT_KEY"] == "a2V5"
    assert env["CATALOG_AZURE_VEND_CREDENTIALS"] == "true" and env["CATALOG_AZURE_SAS_SCOPE"] == "container"
    raw = {e["name"]: e for e in server_container(azure)["env"]}
    assert (
        "value" not in raw["CATALOG_AZURE_ACCOUNT_KEY"]
        and "secretKeyRef" in raw["CATALOG_AZURE_ACCOUNT_KEY"]["valueFrom"]
    )
    existing = {e["name"]: e for e in server_container(render("azure-existing-secret"))["env"]}
    assert existing["CATALOG_AZURE_ACCOUNT_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "az", "key": "key"}
    assert existing["CATALOG_AZURE_BLOB_ENDPOINT"]["value"] == "http://azurite:10000/acct"
    gcs = {e["name"]: e.get("value") for e in server_container(render("gcs"))["env"]}
    assert gcs["CATALOG_WAREHOUSE"] == "gs://lake/wh" and gcs["CATALOG_GCS_PROJECT"] == "p"
    assert gcs["CATALOG_GCS_VEND_CREDENTIALS"] == "true"
    assert gcs["CATALOG_GCS_CLIENT_ENDPOINT"] == "https://storage.example"


# --- `helm install` with no values: one pod on the embedded default (issue 28) --------------------


def _helm_render(values: dict) -> dict[str, list[dict]]:
    """The chart rendered with helm-python-sdk: its manifests by kind."""
    import yaml

    helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed")
    with helm.Chart.load(str(ROOT / "helm" / "iceberg-catalog")) as chart:
        files = chart.render(values, name="lake", namespace="data", is_install=True)
    kinds: dict[str, list[dict]] = {}
    for path, text in sorted(files.items()):
        if path.endswith(".txt") or not text.strip():
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                kinds.setdefault(doc["kind"], []).append(doc)
    return kinds


def test_helm_install_with_no_values_is_one_working_pod_on_the_embedded_default():
    """No values: one pod, SQLite and a local warehouse on a claim the chart makes, no migration Job (it
    would migrate a file the server never sees) and no database password to invent; the server's own
    start-up check (an unusable warehouse is refused) passes on that volume."""
    kinds = _helm_render({})
    (deployment,) = kinds["Deployment"]
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"]["type"] == "Recreate"
    pod = deployment["spec"]["template"]["spec"]
    (container,) = [c for c in pod["containers"] if c["name"] == "catalog"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    mount = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "data")
    assert env["CATALOG_DATABASE_URL"] == f"sqlite:///{mount}/catalog.db"
    assert env["CATALOG_WAREHOUSE"] == f"{mount}/warehouse"
    assert "DATABASE_PASSWORD" not in env
    (claim,) = kinds["PersistentVolumeClaim"]
    volume = next(v for v in pod["volumes"] if v["name"] == "data")
    assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "10Gi"
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert "Job" not in kinds
    kv = pytest.importorskip("kubernetes_validate.utils", reason="kubernetes-validate is not installed")
    version = sorted(set(kv.all_versions()), key=lambda v: tuple(int(p) for p in v.split(".")))[-1]
    for docs in kinds.values():
        for manifest in docs:
            kv.validate(manifest, version, strict=True)


@pytest.mark.parametrize(
    ("values", "reason"),
    [
        ({"replicaCount": 2}, "the embedded default"),
        ({"autoscaling": {"enabled": True}}, "the embedded default"),
        ({"database": {"host": "pg"}}, "database.password is empty"),  # PostgreSQL half set: refused, not embedded
    ],
)
def test_unworkable_values_are_still_refused(values, reason):
    helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed")
    with pytest.raises(helm.HelmError) as failure:
        _helm_render(values)
    assert reason in str(failure.value)


def test_postgresql_values_are_unchanged_by_the_embedded_default():
    kinds = _helm_render({"database": {"password": "pw"}})
    (deployment,) = kinds["Deployment"]
    assert deployment["spec"]["replicas"] == 2 and "PersistentVolumeClaim" not in kinds and "Job" in kinds
    (container,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "catalog"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["CATALOG_DATABASE_URL"].startswith("postgresql+psycopg://catalog:$(DATABASE_PASSWORD)@postgresql:")
    assert env["CATALOG_WAREHOUSE"] == "s3://warehouse/"
