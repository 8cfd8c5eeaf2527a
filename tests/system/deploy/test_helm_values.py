"""deploy/helm/values.yaml, the production instance, checked without a cluster and without Helm.

``instance_config`` renders the dagster.yaml that Dagster's chart (1.13.x) puts in its instance ConfigMap
for these values, following the chart's templates (configmap-instance.yaml and helpers/instance/*.tpl)
for the keys this project sets; ``chart_keys`` refuses, at every level it renders, a key the chart's values
schema does not have (Helm itself would ignore many: runMonitoring, for one, is a free-form map there).
The rendered config is then validated as Dagster loads an instance (``dagster_instance_config``) and each
pluggable class's block against that class's ``config_type()``; the Kubernetes parts (resources, env
sources, the run Job's spec) against the kubernetes client models. The chart's own values.schema.json is
not read: it is not installed here.
"""

import importlib
import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy
import yaml
from dagster import Definitions
from dagster._config import process_config
from dagster._core.instance.config import ConcurrencyConfig, PoolGranularity, dagster_instance_config
from dagster._core.run_coordinator.queued_run_coordinator import QueuedRunCoordinator
from dagster._core.storage.dagster_run import DagsterRun
from dagster_k8s import K8sRunLauncher
from dagster_k8s.job import construct_dagster_k8s_job
from dagster_postgres.utils import pg_url_from_config
from kubernetes.client import V1ConfigMapEnvSource, V1Container, V1JobSpec, V1ResourceRequirements

from marin_pipelines.defs.experiments_component import experiment_definitions
from marin_pipelines.defs.step_assets import slug
from marin_pipelines.experiments import demo
from marin_pipelines.resources import default_resources
from marin_pipelines.resources.launcher import RUN_POD, K8sLauncher
from marin_pipelines.resources.launcher_env import data_run_tags, launcher_from_env
from marin_pipelines.resources.multi_host import k8s_model

VALUES = Path(__file__).parents[3] / "deploy" / "helm" / "values.yaml"
RELEASE = "dagster"
ITEM = "*"  # a list's items, in a path of CHART_KEYS
# what the chart's pods set, and the rendered config reads through {env: ...}
CHART_ENV = {
    "DAGSTER_HOME": "/opt/dagster/dagster_home",
    "DAGSTER_PG_PASSWORD": "not-a-password",
    "DAGSTER_K8S_INSTANCE_CONFIG_MAP": f"{RELEASE}-instance",
    "DAGSTER_K8S_PG_PASSWORD_SECRET": "dagster-postgresql-secret",
    "DAGSTER_K8S_PIPELINE_RUN_ENV_CONFIGMAP": f"{RELEASE}-pipeline-env",
}

# The keys of the chart's values schema at each level this test reads (helm/dagster/schema)
CHART_KEYS: dict[tuple[str, ...], set[str]] = {
    (): {
        "dagsterWebserver", "dagster-user-deployments", "postgresql", "generatePostgresqlPasswordSecret",
        "generateCeleryConfigSecret", "rabbitmq", "redis", "flower", "ingress", "imagePullSecrets",
        "computeLogManager", "scheduler", "runLauncher", "pythonLogs", "dagsterDaemon", "busybox", "migrate",
        "telemetry", "serviceAccount", "global", "retention", "concurrency", "additionalInstanceConfig",
    },
    ("global",): {
        "postgresqlSecretName", "dagsterHome", "serviceAccountName", "celeryConfigSecretName",
        "dagsterInstanceConfigMap",
    },
    ("serviceAccount",): {"create", "name", "annotations"},
    ("dagster-user-deployments",): {"enabled", "enableSubchart", "imagePullSecrets", "deployments"},
    ("dagster-user-deployments", "deployments", ITEM): {
        "name", "image", "dagsterApiGrpcArgs", "codeServerArgs", "includeConfigInLaunchedRuns", "port",
        "env", "envConfigMaps", "envSecrets", "annotations", "nodeSelector", "affinity", "tolerations",
        "podSecurityContext", "securityContext", "resources", "livenessProbe", "readinessProbe",
        "startupProbe", "labels", "volumeMounts", "volumes", "schedulerName",
    },
    ("dagster-user-deployments", "deployments", ITEM, "image"): {"repository", "tag", "pullPolicy", "digest"},
    ("dagster-user-deployments", "deployments", ITEM, "includeConfigInLaunchedRuns"): {"enabled"},
    ("postgresql",): {
        "image", "enabled", "postgresqlHost", "postgresqlUsername", "postgresqlPassword",
        "postgresqlDatabase", "postgresqlParams", "postgresqlScheme", "service",
    },
    ("postgresql", "service"): {"port"},
    ("scheduler",): {"type", "config"},
    ("runLauncher",): {"type", "config"},
    ("runLauncher", "config"): {"celeryK8sRunLauncher", "k8sRunLauncher", "customRunLauncher"},
    ("runLauncher", "config", "k8sRunLauncher"): {
        "image", "imagePullPolicy", "jobNamespace", "loadInclusterConfig", "kubeconfigFile", "envConfigMaps",
        "envSecrets", "envVars", "volumeMounts", "volumes", "labels", "failPodOnRunFailure", "resources",
        "schedulerName", "securityContext", "runK8sConfig",
    },
    ("runLauncher", "config", "k8sRunLauncher", "runK8sConfig"): {
        "containerConfig", "podSpecConfig", "podTemplateSpecMetadata", "jobSpecConfig", "jobMetadata",
    },
    ("computeLogManager",): {"type", "config"},
    ("computeLogManager", "config"): {
        "azureBlobComputeLogManager", "gcsComputeLogManager", "s3ComputeLogManager",
        "customComputeLogManager",
    },
    ("computeLogManager", "config", "gcsComputeLogManager"): {
        "bucket", "localDir", "prefix", "jsonCredentialsEnvvar", "uploadInterval",
    },
    ("dagsterDaemon",): {
        "enabled", "image", "runCoordinator", "heartbeatTolerance", "env", "envConfigMaps", "envSecrets",
        "deploymentLabels", "labels", "nodeSelector", "affinity", "tolerations", "podSecurityContext",
        "securityContext", "resources", "checkDbReadyInitContainer", "livenessProbe", "readinessProbe",
        "startupProbe", "annotations", "runMonitoring", "runRetries", "sensors", "schedules", "backfills",
        "schedulerName", "logFormat", "volumeMounts", "volumes", "initContainerResources", "extraContainers",
        "extraPrependedInitContainers",
    },
    ("dagsterDaemon", "runCoordinator"): {"enabled", "type", "config"},
    ("dagsterDaemon", "runCoordinator", "config"): {"queuedRunCoordinator", "customRunCoordinator"},
    ("dagsterDaemon", "runCoordinator", "config", "queuedRunCoordinator"): {
        "maxConcurrentRuns", "tagConcurrencyLimits", "dequeueIntervalSeconds", "dequeueNumWorkers",
        "dequeueUseThreads", "blockOpConcurrencyLimitedRuns",
    },
    # free-form maps in the schema: these are the keys the instance template renders
    ("dagsterDaemon", "runMonitoring"): {
        "enabled", "startTimeoutSeconds", "cancelTimeoutSeconds", "maxResumeRunAttempts",
        "pollIntervalSeconds", "freeSlotsAfterRunEndSeconds", "maxRuntimeSeconds",
    },
    ("dagsterDaemon", "runRetries"): {"enabled", "maxRetries", "retryOnAssetOrOpFailure"},
    ("concurrency",): {"enabled", "pools", "runs"},
    ("concurrency", "pools"): {"defaultLimit", "granularity", "opGranularityRunBuffer"},
    ("concurrency", "runs"): {"maxConcurrentRuns", "tagConcurrencyLimits"},
    ("concurrency", "runs", "tagConcurrencyLimits", ITEM): {"key", "value", "limit"},
    ("telemetry",): {"enabled"},
}  # fmt: skip


def chart_keys(node: Any, path: tuple[str, ...] = ()) -> None:
    """Raise on a key the chart does not have, at each level of CHART_KEYS."""
    if isinstance(node, list):
        for item in node:
            chart_keys(item, (*path, ITEM))
    elif isinstance(node, dict):
        allowed = CHART_KEYS.get(path)
        unknown = set(node) - allowed if allowed is not None else set()
        if unknown:
            raise ValueError(f"{'.'.join(path) or 'values'}: the chart has no key {sorted(unknown)}")
        for key, child in node.items():
            chart_keys(child, (*path, key))


def snake(name: str) -> str:
    """The chart's mapping of a values key to its instance key: maxRuntimeSeconds -> max_runtime_seconds."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def snake_keys(section: dict[str, Any]) -> dict[str, Any]:
    return {snake(key): value for key, value in section.items()}


def storage(module: str, cls: str, values: dict[str, Any]) -> dict[str, Any]:
    pg = values["postgresql"]
    host = f"{RELEASE}-postgresql" if pg["enabled"] else pg["postgresqlHost"]
    db = {
        "username": pg["postgresqlUsername"],
        "password": {"env": "DAGSTER_PG_PASSWORD"},
        "hostname": host,
        "db_name": pg["postgresqlDatabase"],
        "port": pg["service"]["port"],
        "params": pg["postgresqlParams"],
    }
    if pg.get("postgresqlScheme"):
        db["scheme"] = pg["postgresqlScheme"]
    return {"module": module, "class": cls, "config": {"postgres_db": db}}


def run_launcher(values: dict[str, Any]) -> dict[str, Any]:
    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    k8s = dict(values["runLauncher"]["config"]["k8sRunLauncher"])
    account = values["global"].get("serviceAccountName") or values["serviceAccount"]["name"]
    config = {
        "load_incluster_config": k8s.pop("loadInclusterConfig"),
        "job_namespace": k8s.pop("jobNamespace"),
        "image_pull_policy": k8s.pop("imagePullPolicy"),
        "service_account_name": account,
        "dagster_home": {"env": "DAGSTER_HOME"},
        "instance_config_map": {"env": "DAGSTER_K8S_INSTANCE_CONFIG_MAP"},
        "postgres_password_secret": {"env": "DAGSTER_K8S_PG_PASSWORD_SECRET"},
        "env_config_maps": [
            {"env": "DAGSTER_K8S_PIPELINE_RUN_ENV_CONFIGMAP"},
            *(source["name"] for source in k8s.pop("envConfigMaps", [])),
        ],
    }
    if "envSecrets" in k8s:
        config["env_secrets"] = [source["name"] for source in k8s.pop("envSecrets")]
    if "runK8sConfig" in k8s:
        config["run_k8s_config"] = snake_keys(k8s.pop("runK8sConfig"))
    return {"module": "dagster_k8s", "class": "K8sRunLauncher", "config": config | snake_keys(k8s)}


def run_coordinator(values: dict[str, Any]) -> dict[str, Any]:
    coordinator = values["dagsterDaemon"]["runCoordinator"]
    assert coordinator["type"] == "QueuedRunCoordinator"
    queued = coordinator["config"]["queuedRunCoordinator"]
    runs = values["concurrency"].get("runs", {}) if values["concurrency"]["enabled"] else {}
    for key in ("maxConcurrentRuns", "tagConcurrencyLimits"):  # the chart fails on both
        if key in runs and key in queued:
            raise ValueError(f"Cannot set both concurrency.runs.{key} and queuedRunCoordinator.{key}")
    block = {"module": "dagster._core.run_coordinator", "class": "QueuedRunCoordinator"}
    return block | ({"config": snake_keys(queued)} if queued else {})


def instance_config(values: dict[str, Any]) -> dict[str, Any]:
    """The dagster.yaml of the chart's instance ConfigMap for ``values``."""
    chart_keys(values)
    assert values["scheduler"]["type"] == "DagsterDaemonScheduler"
    assert values["computeLogManager"]["type"] == "GCSComputeLogManager"
    daemon = values["dagsterDaemon"]
    config = {
        "scheduler": {"module": "dagster._core.scheduler", "class": "DagsterDaemonScheduler"},
        "schedule_storage": storage("dagster_postgres.schedule_storage", "PostgresScheduleStorage", values),
        "run_launcher": run_launcher(values),
        "run_storage": storage("dagster_postgres.run_storage", "PostgresRunStorage", values),
        "event_log_storage": storage("dagster_postgres.event_log", "PostgresEventLogStorage", values),
        "compute_logs": {
            "module": "dagster_gcp.gcs.compute_log_manager",
            "class": "GCSComputeLogManager",
            "config": snake_keys(values["computeLogManager"]["config"]["gcsComputeLogManager"]),
        },
        "telemetry": {"enabled": values["telemetry"]["enabled"]},
    }
    if daemon["runCoordinator"]["enabled"]:
        config["run_coordinator"] = run_coordinator(values)
    for key in ("runMonitoring", "runRetries"):
        if daemon[key]["enabled"]:
            config[snake(key)] = snake_keys(daemon[key])
    if values["concurrency"]["enabled"]:
        sections = {key: values["concurrency"][key] for key in ("pools", "runs")}
        config["concurrency"] = {key: snake_keys(section) for key, section in sections.items()}
    return config


def kubernetes_parts(values: dict[str, Any]) -> None:
    """The Kubernetes objects inside the values, as the kubernetes client reads them."""
    for deployment in values["dagster-user-deployments"]["deployments"]:
        k8s_model(V1ResourceRequirements, deployment["resources"])
        for source in deployment["envConfigMaps"]:
            k8s_model(V1ConfigMapEnvSource, source)
    launcher = values["runLauncher"]["config"]["k8sRunLauncher"]
    k8s_model(V1ResourceRequirements, launcher["resources"])
    for source in launcher["envConfigMaps"]:
        k8s_model(V1ConfigMapEnvSource, source)
    job_spec = launcher["runK8sConfig"]["jobSpecConfig"]
    k8s_model(V1JobSpec, {**job_spec, "template": {}})  # the launcher adds the run's pod template
    k8s_model(V1Container, {"name": "dagster", **launcher["runK8sConfig"]["containerConfig"]})


def load_instance(values: dict[str, Any], home: Path) -> dict[str, Any]:
    """The instance Dagster would load from what the chart renders for ``values``."""
    rendered = instance_config(values)
    kubernetes_parts(values)
    (home / "dagster.yaml").write_text(yaml.safe_dump(rendered))
    config, _ = dagster_instance_config(str(home))
    return config


@pytest.fixture
def values() -> dict[str, Any]:
    return yaml.safe_load(VALUES.read_text())


@pytest.fixture
def instance(values, tmp_path, monkeypatch) -> dict[str, Any]:
    for name, value in CHART_ENV.items():
        monkeypatch.setenv(name, value)
    return load_instance(values, tmp_path)


@pytest.mark.parametrize(
    "section",
    [
        "run_launcher",
        "run_coordinator",
        "compute_logs",
        "run_storage",
        "event_log_storage",
        "schedule_storage",
        "scheduler",
    ],
)
def test_each_pluggable_class_imports_and_accepts_its_config(instance, section):
    block = instance[section]
    cls = getattr(importlib.import_module(block["module"]), block["class"])
    result = process_config(cls.config_type(), block.get("config", {}))
    assert result.success, result.errors
    misspelt = {**block.get("config", {}), "max_concurent_runs": 1}
    assert not process_config(cls.config_type(), misspelt).success  # the check can fail


def test_production_runs_on_kubernetes_with_postgres_and_gcs_logs(instance):
    assert instance["run_launcher"]["class"] == "K8sRunLauncher"
    assert instance["run_launcher"]["config"]["job_namespace"] == "marin"
    assert {instance[k]["module"] for k in ("run_storage", "event_log_storage", "schedule_storage")} == {
        "dagster_postgres.run_storage",
        "dagster_postgres.event_log",
        "dagster_postgres.schedule_storage",
    }
    assert instance["compute_logs"]["class"] == "GCSComputeLogManager"
    assert instance["run_coordinator"]["class"] == "QueuedRunCoordinator"


def test_the_storage_url_names_a_driver_the_image_has(instance):
    """SQLAlchemy 2.1 reads a bare ``postgresql://`` as psycopg 3, which is not installed: every run pod
    would fail to open the instance. Making the engine imports the driver; nothing connects."""
    for section in ("run_storage", "event_log_storage", "schedule_storage"):
        block = instance[section]
        cls = getattr(importlib.import_module(block["module"]), block["class"])
        config = process_config(cls.config_type(), block["config"])  # the password read from its env
        assert config.success, config.errors
        sqlalchemy.create_engine(pg_url_from_config(config.value)).dispose()


def test_pools_hold_one_run_each_unless_raised_and_crawls_stay_in_order(instance):
    queued = QueuedRunCoordinator.from_config_value(None, instance["run_coordinator"].get("config", {}))
    concurrency = ConcurrencyConfig.from_concurrency_settings(
        instance["concurrency"], queued.get_run_queue_config()
    )
    assert concurrency.pool_config.pool_granularity == PoolGranularity.RUN
    assert concurrency.pool_config.default_pool_limit == 1
    assert concurrency.run_queue_config.max_concurrent_runs == 24
    # crawl snapshots stay in order through their pool (step_assets.crawl_pool), not a run tag


def test_long_training_runs_are_monitored_and_retried_not_cut_short(instance, marin_env):
    monitoring, retries = instance["run_monitoring"], instance["run_retries"]
    assert monitoring["enabled"] and retries["enabled"] and retries["max_retries"] >= 1
    assert retries["retry_on_asset_or_op_failure"]  # a preempted training pod fails its step
    launcher = launcher_from_env(marin_env)
    # configured limits, not measured times: the monitor's cap above the launcher's, both in days
    monitor_cap, launcher_cap = monitoring["max_runtime_seconds"], launcher.run_seconds
    assert monitor_cap > launcher_cap >= 7 * 24 * 3600  # days, not the 24 h


def test_the_code_location_serves_this_package_with_the_launcher_of_the_cluster(values, marin_env):
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    flag, module, *_ = deployment["dagsterApiGrpcArgs"]
    assert flag == "-m" and importlib.util.find_spec(module) is not None
    assert deployment["includeConfigInLaunchedRuns"]["enabled"]  # runs get the location's environment
    launcher_sources = values["runLauncher"]["config"]["k8sRunLauncher"]["envConfigMaps"]
    assert deployment["envConfigMaps"] == launcher_sources == [{"name": "marin-env"}]
    launcher = launcher_from_env(marin_env)
    assert isinstance(launcher, K8sLauncher)
    assert launcher.image.rpartition(":")[0] == deployment["image"]["repository"]
    assert launcher.namespace == values["runLauncher"]["config"]["k8sRunLauncher"]["jobNamespace"]
    assert launcher.pool() in VALUES.read_text()  # the documented `concurrency set` names a real pool


def test_run_pods_tell_the_launcher_who_they_are(instance):
    container = instance["run_launcher"]["config"]["run_k8s_config"]["container_config"]
    fields = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert fields == dict(zip(RUN_POD, ["metadata.name", "metadata.uid", "metadata.namespace"], strict=True))


def test_no_secret_value_is_written(values):
    assert "postgresqlPassword" not in values["postgresql"] and not values["generatePostgresqlPasswordSecret"]


@pytest.mark.parametrize(
    "path",
    [
        ("dagsterDaemon", "runMonitoring", "maxRuntimeSeconds"),
        ("concurrency", "pools", "defaultLimit"),
        ("runLauncher", "config", "k8sRunLauncher", "jobNamespace"),
        ("runLauncher", "config", "k8sRunLauncher", "resources", "limits"),
        ("runLauncher", "config", "k8sRunLauncher", "runK8sConfig", "containerConfig", "env", 0, "valueFrom"),
        (
            "runLauncher",
            "config",
            "k8sRunLauncher",
            "runK8sConfig",
            "jobSpecConfig",
            "ttlSecondsAfterFinished",
        ),
        ("dagster-user-deployments", "deployments", 0, "envConfigMaps"),
        ("computeLogManager", "config", "gcsComputeLogManager", "prefix"),
    ],
)
def test_a_misspelt_key_is_refused(values, tmp_path, monkeypatch, misspelt, path):
    for name, value in CHART_ENV.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(Exception, match=str(path[-1])):
        load_instance(misspelt(values, *path), tmp_path)


def run_worker_container(instance: dict[str, Any], tags: dict[str, str], tmp_path: Path) -> V1Container:
    """The run worker's container, as this instance's ``K8sRunLauncher`` would create it for a run with
    ``tags`` (everything it does but the API call; a kubeconfig for a cluster that is never asked)."""
    block = instance["run_launcher"]
    processed = process_config(K8sRunLauncher.config_type(), block["config"])
    assert processed.success, processed.errors
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(KUBECONFIG))
    config = {**processed.value, "load_incluster_config": False, "kubeconfig_file": str(kubeconfig)}
    launcher = K8sRunLauncher.from_config_value(None, config)
    run = DagsterRun(job_name="a_job", run_id="0" * 36, tags=tags)
    context = launcher.get_container_context_for_run(run)
    job = construct_dagster_k8s_job(
        context.get_k8s_job_config(job_image="marin:1", run_launcher=launcher),
        args=["dagster", "api", "execute_run"],
        job_name="dagster-run-0",
        user_defined_k8s_config=context.run_k8s_config,
        component="run_worker",
    )
    (container,) = job.spec.template.spec.containers
    return container


KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
    "users": [{"name": "u", "user": {"token": "unused"}}],
    "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
    "current-context": "x",
}


def test_document_jobs_get_run_pods_of_the_size_marin_env_sets(
    values, instance, marin_env, tmp_path, monkeypatch
):
    for name, value in marin_env.items():
        monkeypatch.setenv(name, value)
    defs = Definitions.merge(experiment_definitions([demo.demo]), Definitions(resources=default_resources()))
    snapshot, pipeline = defs.resolve_job_def("demo_crawl_snapshot"), defs.resolve_job_def("demo_pipeline")
    sizes = data_run_tags(marin_env)
    assert sizes and all(job.run_tags.items() >= sizes.items() for job in (snapshot, pipeline))
    assert snapshot.run_tags["marin/crawl"] == "demo/crawl"
    assert pipeline.run_tags["marin/experiment"] == "demo"

    sized = run_worker_container(instance, dict(snapshot.run_tags), tmp_path).resources
    data = {"cpu": marin_env["MARIN_K8S_DATA_CPU"], "memory": marin_env["MARIN_K8S_DATA_MEMORY"]}
    data["ephemeral-storage"] = marin_env["MARIN_K8S_DATA_DISK"]
    assert sized.requests == sized.limits == data  # the cgroup quota its stages size their workers by

    # a ladder rung's run only orchestrates (its training has pods of its own): the chart's small default
    ladder = defs.resolve_job_def(f"{slug(demo.ladder.checkpoints)}_runs")
    default = run_worker_container(instance, dict(ladder.run_tags), tmp_path).resources
    chart = values["runLauncher"]["config"]["k8sRunLauncher"]["resources"]
    assert (default.requests, default.limits) == (chart["requests"], chart["limits"])


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("MARIN_K8S_DATA_CPU", "sixteen", "MARIN_K8S_DATA_CPU='sixteen' must be a Kubernetes quantity"),
        ("MARIN_K8S_DATA_MEMORYY", "64Gi", "unknown variable MARIN_K8S_DATA_MEMORYY"),
    ],
)
def test_a_wrong_run_pod_size_names_the_variable(marin_env, variable, value, message):
    env = {**marin_env, variable: value}
    with pytest.raises(ValueError, match=re.escape(message)):
        launcher_from_env(env)
        data_run_tags(env)
