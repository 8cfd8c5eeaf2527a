"""The Kubernetes launcher's pod spec, validated by the kubernetes client models, the commands it runs,
its accelerator pool, and multi-host training: the worker Job, the headless Service and each process's
environment, with a stand-in for the cluster's API.

The local launcher's runs through Dagster Pipes are tested beside the train command (tests/train) and the
eval assets (tests/evals)."""

import argparse
import json
import os
import subprocess
import sys
from inspect import signature
from pathlib import Path

import pytest
from dagster_k8s import PipesK8sClient
from dagster_k8s.pipes import build_pod_body
from kubernetes.client import ApiClient, BatchV1Api, CoreV1Api, V1Job, V1PodSpec, V1Service
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from marin_pipelines.cli import eval as eval_cli
from marin_pipelines.cli import sft as sft_cli
from marin_pipelines.cli import train as train_cli
from marin_pipelines.evals.checkpoint_eval import EvalConfig
from marin_pipelines.evals.launch_config import EvalLaunch
from marin_pipelines.resources import default_resources
from marin_pipelines.resources.launcher import K8sLauncher, LocalLauncher
from marin_pipelines.resources.launcher_env import launcher_from_env
from marin_pipelines.resources.multi_host import COORDINATOR_PORT, LAUNCH_LABEL, NODE_POOL, k8s_model
from marin_pipelines.train.launch_config import SFTLaunch, TrainLaunch
from marin_pipelines.train.run_config import RunConfig
from marin_pipelines.train.train_config import TrainConfig


def validated(spec: dict) -> V1PodSpec:
    """The spec as the kubernetes client reads it: strict about every key's name and type."""
    return k8s_model(V1PodSpec, spec)


TPU = dict(
    image="us-docker.pkg.dev/lab/marin:1",
    accelerator="tpu",
    tpu_type="tpu-v5-lite-podslice",
    tpu_topology="2x4",
    chips=8,
    service_account="marin-train",
    env={"WANDB_MODE": "online"},
    secret_env={"WANDB_API_KEY": "wandb/api-key"},
    volume_claim="marin-store",
    store_mount="/store",
    store_root="/store/marin",
)


def test_tpu_pod_spec_is_a_valid_kubernetes_pod_spec():
    spec = validated(K8sLauncher(**TPU).pod_spec())
    assert spec.node_selector == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
        "cloud.google.com/gke-tpu-topology": "2x4",
    }
    (container,) = spec.containers
    assert container.resources.limits["google.com/tpu"] == "8" and container.image == TPU["image"]
    assert spec.service_account_name == "marin-train" and spec.restart_policy == "Never"
    secret = next(e for e in container.env if e.name == "WANDB_API_KEY").value_from.secret_key_ref
    assert (secret.name, secret.key) == ("wandb", "api-key")
    assert container.volume_mounts[0].mount_path == "/store"
    assert spec.volumes[0].persistent_volume_claim.claim_name == "marin-store"
    assert {e.name: e.value for e in container.env}["MARIN_STORE_ROOT"] == "/store/marin"
    assert spec.active_deadline_seconds == 7 * 24 * 3600  # an orphaned pod ends too


def test_gpu_pod_spec_requests_nvidia_gpus():
    launcher = K8sLauncher(image="marin:1", accelerator="gpu", gpu_type="nvidia-h100-80gb", chips=1)
    spec = validated(launcher.pod_spec())
    assert spec.containers[0].resources.limits["nvidia.com/gpu"] == "1"
    assert spec.node_selector == {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}
    assert "google.com/tpu" not in spec.containers[0].resources.limits


@pytest.mark.parametrize(
    ("update", "message"),
    [
        ({"tpu_topology": None}, "needs tpu_type and tpu_topology"),
        ({"secret_env": {"KEY": "no-slash"}}, "secret-name/key"),
        ({"store_mount": None}, "volume_claim and store_mount go together"),
        ({"chips": 4}, "2x4 has 8 chips, but chips x hosts is 4 x 1"),
        ({"tpu_topology": "2by4"}, "tpu_topology must be dimensions like 2x4"),
        ({"store_root": "/data/store"}, "local folder the pods cannot see"),
        ({"memory": "16 GB"}, "memory must be a Kubernetes quantity"),
    ],
)
def test_bad_k8s_launcher_config_is_refused(update, message):
    with pytest.raises(ValidationError, match=message):
        K8sLauncher(**{**TPU, **update})


def test_a_misspelt_field_would_be_caught():
    with pytest.raises(Exception, match="nodeSelektor"):
        validated({**K8sLauncher(**TPU).pod_spec(), "nodeSelektor": {}})


class Launched(Exception):
    """Raised by the stand-in for the cluster once the pod it was asked to start has been recorded."""


class Cluster(ApiClient):
    """Stands in for the cluster, short of the network: the kubernetes client's own API classes send their
    requests here (method, path, query, body as the client serialises it), and the pods the launcher asks
    PipesK8sClient to run are built as dagster-k8s builds them, all recorded in order. A pod fails
    (``Launched``) unless ``pods_succeed``; a POST to a path in ``refused`` fails as the API server would."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple] = []
        self.pods_succeed = False
        self.refused: set[str] = set()

    def call_api(
        self, resource_path, method, path_params=None, query_params=None, header_params=None, body=None, **_
    ):
        path = resource_path.format(**(path_params or {}))
        if path in self.refused:
            raise ApiException(status=403, reason=f"forbidden: {path}")
        self.sanitize_for_serialization(body)  # what would go over the wire
        self.calls.append((method, path, dict(query_params or []), body))
        if isinstance(body, V1Job):
            body.metadata.uid = "job-uid"  # as the API server answers
        return body

    def run(self, **kwargs):
        signature(PipesK8sClient.run).bind(None, **kwargs)  # the real client takes these arguments
        pod = build_pod_body(
            "pod",
            kwargs["image"],
            kwargs["command"],
            kwargs["env"],
            kwargs["base_pod_meta"],
            kwargs["base_pod_spec"],
        )
        self.calls.append(("run pod", pod, kwargs["pod_wait_timeout"]))
        if not self.pods_succeed:
            raise Launched
        return type("Invocation", (), {"get_custom_messages": lambda self: [{"step": 1}]})()

    @property
    def pods(self) -> list:
        return [call[1] for call in self.calls if call[0] == "run pod"]


@pytest.fixture
def cluster(monkeypatch) -> Cluster:
    stand_in = Cluster()
    monkeypatch.setattr(PipesK8sClient, "run", lambda self, **kwargs: stand_in.run(**kwargs))
    apis = (CoreV1Api(stand_in), BatchV1Api(stand_in))
    monkeypatch.setattr(K8sLauncher, "kubernetes_apis", lambda self: apis)
    return stand_in


@pytest.fixture
def run(tmp_path) -> TrainLaunch:
    """A training run in a folder of the store (here a temporary one: the launcher writes its file there)."""
    return TrainLaunch(run=RunConfig(model={"size": "nano"}), data=f"{tmp_path}/cache", out=f"{tmp_path}/run")


def evaluation(folder: Path, **fields) -> EvalLaunch:
    """An evaluation of a checkpoint on a cache's validation split, its results in ``folder``."""
    return EvalLaunch(
        checkpoint="/store/demo/checkpoint/_/v1",
        bpb={"web": ["/store/demo/tokenized_cache/_/v3"]},
        out=f"{folder}/results.json",
        **fields,
    )


def command_args(command: list[str], cli) -> argparse.Namespace:
    """What the command line in the pod parses from ``python -m marin_pipelines.cli COMMAND ...``."""
    assert command[:3] == ["python", "-m", "marin_pipelines.cli"]
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    return parser.parse_args(command[3:])


def test_k8s_evaluate_runs_the_eval_command_on_the_training_pod_spec(cluster, run, tmp_path):
    """The launcher writes the child's one config file; the command in the pod reads the same config."""
    launcher = K8sLauncher(**TPU, compilation_cache="/store/jax_cache")
    config = EvalConfig(
        tasks=["marin_python_mc", "marin_python_qa"],
        heldout={"paloma": ["gs://lab/paloma/c4.jsonl", "gs://lab/paloma/wiki.jsonl"]},
        include_paths=["/store/tasks"],
        limit=50,
    )
    launch = evaluation(
        tmp_path, tokenizer="/store/demo/tokenizer/_/v2/tokenizer.json", evals=config, batch_size=32
    )
    with pytest.raises(Launched):
        launcher.evaluate(None, launch)
    with pytest.raises(Launched):
        launcher.train(None, run)
    evaluate, train = cluster.pods
    assert (
        evaluate.spec.node_selector
        == train.spec.node_selector
        == validated(launcher.pod_spec()).node_selector
    )
    container = evaluate.spec.containers[0]
    assert container.resources.limits["google.com/tpu"] == "8"
    assert {e.name: e.value for e in container.env}["JAX_COMPILATION_CACHE_DIR"] == "/store/jax_cache"
    assert {e.name: e.value for e in container.env}["TQDM_DISABLE"] == "1"
    command = evaluate.spec.containers[0].command
    assert command == ["python", "-m", "marin_pipelines.cli", "eval", "--step-config", launch.file]
    assert launch.file == f"{tmp_path}/eval_launch.json"  # beside the results
    assert eval_cli.eval_launch(command_args(command, eval_cli)) == launch

    trained = train_cli.train_launch(command_args(train.spec.containers[0].command, train_cli))
    assert trained == run and not trained.progress_bar  # a pod's log is no terminal: no progress bar


def test_a_step_config_stands_in_for_the_flags_never_beside_them(run):
    def parse(*flags: str) -> argparse.Namespace:
        return command_args(["python", "-m", "marin_pipelines.cli", "train", *flags], train_cli)

    with pytest.raises(ValueError, match="--step-config holds the whole run: give it without --data"):
        train_cli.train_launch(parse("--step-config", run.file, "--data", "/store/cache"))
    with pytest.raises(ValueError, match="required: --data, --out \\(or --step-config\\)"):
        train_cli.train_launch(parse("--config", "run.yaml"))
    with pytest.raises(FileNotFoundError):
        train_cli.train_launch(parse("--step-config", run.file))  # nothing written there yet
    Path(run.file).parent.mkdir()
    Path(run.file).write_text(json.dumps({**run.model_dump(), "runn": {}}))
    with pytest.raises(ValueError, match=f"{run.file}: invalid train: runn: unknown field; allowed: out"):
        train_cli.train_launch(parse("--step-config", run.file))


def test_a_heldout_set_named_like_a_mixture_source_is_refused_before_launching(tmp_path):
    config = EvalConfig(heldout={"web": ["gs://lab/web.jsonl"]})
    with pytest.raises(ValueError, match="clash"):
        evaluation(tmp_path, evals=config)


def test_each_launcher_names_the_pool_of_its_accelerator():
    gpus = K8sLauncher(image="marin:1", accelerator="gpu", gpu_type="nvidia-h100-80gb", chips=8)
    assert LocalLauncher().pool() == "accelerator/cpu"
    assert K8sLauncher(image="marin:1").pool() == "accelerator/cpu"
    assert K8sLauncher(**TPU).pool() == "accelerator/tpu-v5-lite-podslice-2x4"
    assert gpus.pool() == "accelerator/nvidia-h100-80gb"


def test_a_pod_may_run_as_long_as_the_run_budget(cluster, run):
    """PipesK8sClient's own default gives up after 24 hours; a training run may take days."""
    with pytest.raises(Launched):
        K8sLauncher(**TPU).train(None, run)
    with pytest.raises(Launched):
        K8sLauncher(**TPU, run_hours=0.5).train(None, run)
    (_, week_pod, week), (_, half_hour_pod, half_hour) = cluster.calls
    assert week == 7 * 24 * 3600 == week_pod.spec.active_deadline_seconds
    assert half_hour == 1800 == half_hour_pod.spec.active_deadline_seconds


# a v5e slice of 4 hosts with 4 chips each
SLICE = {**TPU, "tpu_topology": "4x4", "chips": 4, "hosts": 4, "namespace": "marin"}


def env_of(container) -> dict[str, str]:
    return {e.name: e.value for e in container.env if e.value is not None}


@pytest.mark.parametrize("pods_succeed", [True, False])
def test_multi_host_training_creates_the_workers_first_and_removes_them_whatever_happens(
    cluster, pods_succeed, run
):
    cluster.pods_succeed = pods_succeed
    launcher = K8sLauncher(**SLICE)
    if pods_succeed:
        assert launcher.train(None, run) == [{"step": 1}]
    else:
        with pytest.raises(Launched):
            launcher.train(None, run)
    job, service = cluster.calls[0][3], cluster.calls[1][3]
    assert isinstance(job, V1Job) and isinstance(service, V1Service)  # real models, checked when built
    assert [call[:3] for call in cluster.calls if call[0] != "run pod"] == [
        ("POST", "/apis/batch/v1/namespaces/marin/jobs", {}),
        ("POST", "/api/v1/namespaces/marin/services", {}),
        ("DELETE", f"/api/v1/namespaces/marin/services/{service.metadata.name}", {}),
        # the Job with its pods
        (
            "DELETE",
            f"/apis/batch/v1/namespaces/marin/jobs/{job.metadata.name}",
            {"propagationPolicy": "Background"},
        ),
    ]
    assert cluster.calls[2][0] == "run pod"  # process 0 starts once both exist, and is gone before them
    assert service.metadata.owner_references[0].uid == "job-uid"  # the Job's TTL would take it along


@pytest.mark.parametrize(
    ("refused", "made_and_unmade"),
    [
        ("/apis/batch/v1/namespaces/marin/jobs", []),
        ("/api/v1/namespaces/marin/services", ["POST /apis/batch/v1/namespaces/marin/jobs", "DELETE"]),
    ],
)
def test_what_could_not_be_created_leaves_nothing_behind(cluster, refused, made_and_unmade, run):
    cluster.refused.add(refused)
    with pytest.raises(ApiException, match="forbidden"):
        K8sLauncher(**SLICE).train(None, run)
    assert [f"{method} {path}" if method == "POST" else method for method, path, *_ in cluster.calls] == (
        made_and_unmade
    )
    assert not cluster.pods


def test_every_host_gets_its_process_id_and_process_0_as_coordinator(cluster, run):
    """Process 0 is the pod PipesK8sClient runs (Dagster hears from it); the workers are the Job's."""
    with pytest.raises(Launched):
        K8sLauncher(**SLICE).train(None, run)
    job, service = cluster.calls[0][3], cluster.calls[1][3]
    (leader,) = cluster.pods
    name = service.metadata.name

    # DNS: the headless Service selects every pod, process 0 included, and names them under it
    assert service.spec.cluster_ip == "None" and service.spec.publish_not_ready_addresses
    assert service.spec.selector == {LAUNCH_LABEL: name}
    assert leader.metadata.labels[LAUNCH_LABEL] == job.spec.template.metadata.labels[LAUNCH_LABEL] == name
    assert leader.spec.subdomain == job.spec.template.spec.subdomain == name
    leader_env = env_of(leader.spec.containers[0])
    coordinator = f"{leader.spec.hostname}.{name}.marin.svc:{COORDINATOR_PORT}"
    assert leader_env["MARIN_COORDINATOR_ADDRESS"] == coordinator
    assert (leader_env["MARIN_NUM_PROCESSES"], leader_env["MARIN_PROCESS_ID"]) == ("4", "0")

    # the other three hosts: one Indexed Job, the same pod spec, the same coordinator
    assert (job.spec.completion_mode, job.spec.completions, job.spec.parallelism) == ("Indexed", 3, 3)
    assert job.spec.active_deadline_seconds == 7 * 24 * 3600
    worker = job.spec.template.spec.containers[0]
    assert worker.resources == leader.spec.containers[0].resources and worker.image == TPU["image"]
    assert job.spec.template.spec.node_selector == leader.spec.node_selector
    assert env_of(worker)["MARIN_COORDINATOR_ADDRESS"] == coordinator
    assert worker.command[-len(leader.spec.containers[0].command) :] == leader.spec.containers[0].command

    # each worker's preamble, run as its pod runs it: process id = completion index + 1
    hostnames = leader_env["TPU_WORKER_HOSTNAMES"].split(",")
    assert hostnames[0] == coordinator.rsplit(":", 1)[0]
    show_env = "import json, os; print(json.dumps(dict(os.environ)))"
    for index in range(3):
        command = [*worker.command[:4], sys.executable, "-c", show_env]  # the preamble, then our probe
        pod_env = {**env_of(worker), "JOB_COMPLETION_INDEX": str(index), "TPU_WORKER_ID": "webhook's"}
        seen = json.loads(subprocess.run(command, env=pod_env, capture_output=True, check=True).stdout)
        assert seen["MARIN_PROCESS_ID"] == seen["TPU_WORKER_ID"] == str(index + 1)
        assert seen["TPU_WORKER_HOSTNAMES"] == leader_env["TPU_WORKER_HOSTNAMES"]
        # the Indexed Job names this pod <job>-<index>: the address listed for its process is its own
        assert hostnames[index + 1] == f"{job.metadata.name}-{index}.{name}.marin.svc"

    # one slice: every pod on the node pool of process 0
    for spec in (leader.spec, job.spec.template.spec):
        (term,) = spec.affinity.pod_affinity.required_during_scheduling_ignored_during_execution
        assert term.topology_key == NODE_POOL and term.label_selector.match_labels == {LAUNCH_LABEL: name}


RUN_POD_ENV = {"MARIN_RUN_POD_NAME": "dagster-run-1234-x7", "MARIN_RUN_POD_UID": "uid-77"}


@pytest.mark.parametrize("namespace", ["marin", "elsewhere"])
def test_what_is_launched_belongs_to_the_run_pod_in_its_namespace(
    cluster, monkeypatch, namespace, run, tmp_path
):
    """Terminated, or lost with its node, the run's pod takes its training pods along; a pod in another
    namespace cannot own them (Kubernetes would delete them at once), so then nothing is owned."""
    for name, value in {**RUN_POD_ENV, "MARIN_RUN_POD_NAMESPACE": namespace}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(Launched):
        K8sLauncher(**SLICE).train(None, run)
    with pytest.raises(Launched):
        K8sLauncher(**SLICE).evaluate(None, evaluation(tmp_path))
    job = cluster.calls[0][3]
    owned = [job, *cluster.pods]
    owners = [[(o.kind, o.name, o.uid) for o in item.metadata.owner_references or []] for item in owned]
    expected = [("Pod", "dagster-run-1234-x7", "uid-77")] if namespace == "marin" else []
    assert owners == [expected] * 3


def test_gpu_hosts_get_the_contract_without_tpu_variables(cluster, run):
    launcher = K8sLauncher(image="marin:1", accelerator="gpu", gpu_type="nvidia-h100-80gb", chips=8, hosts=2)
    with pytest.raises(Launched):
        launcher.train(None, run)
    job = cluster.calls[0][3]
    (leader,) = cluster.pods
    assert job.spec.completions == 1 and job.spec.template.spec.affinity is None
    assert "TPU_WORKER_ID" not in env_of(leader.spec.containers[0])
    assert "TPU_WORKER_ID" not in " ".join(job.spec.template.spec.containers[0].command)
    assert job.spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"] == "8"


def test_evaluation_stays_one_pod_on_a_multi_host_launcher(cluster, tmp_path):
    with pytest.raises(Launched):
        K8sLauncher(**SLICE).evaluate(None, evaluation(tmp_path))
    ((step, pod, _),) = cluster.calls
    assert step == "run pod" and pod.spec.hostname is None
    assert "MARIN_NUM_PROCESSES" not in env_of(pod.spec.containers[0])


# -- the launcher chosen by environment variables --------------------------------------------------------

K8S_ENV = {
    "MARIN_LAUNCHER": "k8s",
    "MARIN_STORE_ROOT": "gs://lab-marin/store",
    "MARIN_K8S_IMAGE": "us-docker.pkg.dev/lab/marin/marin-pipelines:7",
    "MARIN_K8S_NAMESPACE": "marin",
    "MARIN_K8S_ACCELERATOR": "tpu",
    "MARIN_K8S_TPU_TYPE": "tpu-v5-lite-podslice",
    "MARIN_K8S_TPU_TOPOLOGY": "4x4",
    "MARIN_K8S_CHIPS": "4",
    "MARIN_K8S_HOSTS": "4",
    "MARIN_K8S_CPU": "100",
    "MARIN_K8S_MEMORY": "160Gi",
    "MARIN_K8S_SERVICE_ACCOUNT": "marin-train",
    "MARIN_K8S_SECRETS": "WANDB_API_KEY=wandb/api-key, HF_TOKEN=hf/token",
    "MARIN_K8S_ENV": "WANDB_MODE=online,JAX_PLATFORMS=tpu",
    "MARIN_K8S_COMPILATION_CACHE": "gs://lab-marin/jax_cache",
    "MARIN_K8S_RUN_HOURS": "240",
}


def test_no_launcher_variable_means_the_local_subprocess(monkeypatch):
    for name in [n for n in os.environ if n.startswith("MARIN_K8S_") or n == "MARIN_LAUNCHER"]:
        monkeypatch.delenv(name)
    assert isinstance(default_resources()["launcher"], LocalLauncher)
    assert isinstance(launcher_from_env({"MARIN_LAUNCHER": "local"}), LocalLauncher)


def test_every_variable_configures_the_kubernetes_launcher():
    launcher = launcher_from_env(K8S_ENV)
    assert isinstance(launcher, K8sLauncher)
    assert launcher.model_dump(exclude={"compilation_cache", "env", "secret_env"}) == {
        "image": "us-docker.pkg.dev/lab/marin/marin-pipelines:7",
        "namespace": "marin",
        "service_account": "marin-train",
        "accelerator": "tpu",
        "tpu_type": "tpu-v5-lite-podslice",
        "tpu_topology": "4x4",
        "gpu_type": None,
        "chips": 4,
        "hosts": 4,
        "cpu": "100",
        "memory": "160Gi",
        "volume_claim": None,
        "store_mount": None,
        "store_root": "gs://lab-marin/store",
        "run_hours": 240.0,
    }
    assert launcher.secret_env == {"WANDB_API_KEY": "wandb/api-key", "HF_TOKEN": "hf/token"}
    assert launcher.env == {"WANDB_MODE": "online", "JAX_PLATFORMS": "tpu"}
    assert launcher.compilation_cache == "gs://lab-marin/jax_cache"
    assert launcher.pool() == "accelerator/tpu-v5-lite-podslice-4x4"
    env = env_of(validated(launcher.pod_spec()).containers[0])
    assert env["MARIN_STORE_ROOT"] == "gs://lab-marin/store"  # no volume: the bucket, via Workload Identity


def test_default_resources_hand_the_pods_the_store_root_they_were_given(monkeypatch):
    for name, value in K8S_ENV.items():
        monkeypatch.setenv(name, value)
    resources = default_resources("gs://other-bucket/store")
    assert resources["store"].root == resources["launcher"].store_root == "gs://other-bucket/store"


@pytest.mark.parametrize(
    ("update", "message"),
    [
        ({"MARIN_LAUNCHER": "kubernetes"}, "MARIN_LAUNCHER must be one of local, k8s, got 'kubernetes'"),
        ({"MARIN_K8S_IMAGE": None}, "MARIN_LAUNCHER=k8s needs MARIN_K8S_IMAGE"),
        (
            {"MARIN_K8S_ACCELERATOR": "npu"},
            "MARIN_K8S_ACCELERATOR='npu': Input should be 'cpu', 'tpu' or 'gpu'",
        ),
        ({"MARIN_K8S_TOPOLOGY": "4x4"}, "unknown variable MARIN_K8S_TOPOLOGY; the launcher reads:"),
        ({"MARIN_K8S_CHIPS": "four"}, "MARIN_K8S_CHIPS='four': Input should be a valid integer"),
        ({"MARIN_K8S_HOSTS": "2"}, "4x4 has 16 chips, but chips x hosts is 4 x 2.*hosts is MARIN_K8S_HOSTS"),
        ({"MARIN_K8S_TPU_TYPE": None}, "needs tpu_type and tpu_topology .*tpu_type is MARIN_K8S_TPU_TYPE"),
        (
            {"MARIN_K8S_SECRETS": "WANDB_API_KEY"},
            "MARIN_K8S_SECRETS: entry 'WANDB_API_KEY' must be NAME=VALUE",
        ),
        ({"MARIN_K8S_SECRETS": "WANDB_API_KEY=wandb"}, "must be 'secret-name/key'"),
        (
            {"MARIN_STORE_ROOT": "/srv/store"},
            "local folder the pods cannot see.*store_root is MARIN_STORE_ROOT",
        ),
        ({"MARIN_LAUNCHER": None}, "MARIN_K8S_ACCELERATOR, .* set, but MARIN_LAUNCHER is not k8s"),
    ],
)
def test_a_wrong_or_missing_variable_is_an_error_naming_it(update, message):
    env = {k: v for k, v in {**K8S_ENV, **update}.items() if v is not None}
    with pytest.raises(ValueError, match=message):
        launcher_from_env(env)


def test_fine_tuning_runs_like_training_one_process_per_host(cluster, tmp_path):
    """An SFT run is launched as training is: on a slice, the Job's workers and process 0 run the same
    `sft` command on the same file."""
    launch = SFTLaunch(
        base="/store/base",
        data=["/store/chat/train.jsonl"],
        train=TrainConfig(steps=40),
        chat_template="{{ messages }}",
        out=f"{tmp_path}/sft",
    )
    with pytest.raises(Launched):
        K8sLauncher(**SLICE).train(None, launch)
    job = cluster.calls[0][3]
    (leader,) = cluster.pods
    command = [
        "python",
        "-m",
        "marin_pipelines.cli",
        "sft",
        "--step-config",
        f"{tmp_path}/sft/sft_launch.json",
    ]
    assert leader.spec.containers[0].command == command
    assert job.spec.template.spec.containers[0].command[-len(command) :] == command  # after its preamble
    assert sft_cli.sft_launch(command_args(command, sft_cli)) == launch
