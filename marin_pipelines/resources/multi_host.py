"""Training on several hosts at once on Kubernetes: one pod per host, as JAX's multi-controller runtime wants.

``HostGroup`` is one launch on ``hosts`` pods. Process 0 is the pod that Dagster Pipes watches
(``PipesK8sClient`` creates it and streams its messages); processes 1 to n-1 are an Indexed Job. A
headless Service gives every pod a stable DNS name, ``<hostname>.<service>.<namespace>.svc``, so process
0's address is known before any pod exists. Every pod gets the environment the trainer reads:

- ``MARIN_NUM_PROCESSES``, ``MARIN_PROCESS_ID`` and ``MARIN_COORDINATOR_ADDRESS`` (process 0's
  ``host:port``), for ``jax.distributed.initialize``; ``MARIN_HOSTNAMES``, every process's address in
  process order.
- On TPU, ``TPU_WORKER_ID`` and ``TPU_WORKER_HOSTNAMES`` too, which libtpu reads to form the slice.
  GKE's webhook sets them only for the pods of one Indexed Job, and process 0 is not in it, so they
  are set here (a worker re-exports them at start, over whatever the webhook set).

Kubernetes cannot add 1 to an index in a manifest, so a worker's command is a one-line shell preamble
that exports ``MARIN_PROCESS_ID=JOB_COMPLETION_INDEX + 1`` and then ``exec``s the training command.

``jobset`` builds the other shape, for TPU multislice (several slices over the data-centre network):
a JobSet run outside Dagster. Each slice is one Indexed Job, so GKE sets its ``TPU_WORKER_*``; the
``MEGASCALE_*`` variables join the slices; the trainer is told ``MARIN_DISTRIBUTED=auto`` and JAX finds
the rest (``jax.distributed.initialize()`` with no arguments).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, TypeVar

from dagster_k8s.models import k8s_model_from_dict, k8s_snake_case_dict

NUM_PROCESSES = "MARIN_NUM_PROCESSES"
PROCESS_ID = "MARIN_PROCESS_ID"
COORDINATOR_ADDRESS = "MARIN_COORDINATOR_ADDRESS"
HOSTNAMES = "MARIN_HOSTNAMES"
DISTRIBUTED = "MARIN_DISTRIBUTED"
COORDINATOR_PORT = 8476  # JAX's coordinator port on TPU VMs
LAUNCH_LABEL = "marin/launch"  # every object of one launch carries it; the Service selects by it
NODE_POOL = "cloud.google.com/gke-nodepool"  # one TPU slice is one GKE node pool
# a worker that starts before process 0 can be reached fails its connection and is restarted in place
WORKER_RESTARTS = 6
JOBSET_API = "jobset.x-k8s.io/v1alpha2"

Model = TypeVar("Model")


def k8s_model(model_class: type[Model], body: dict[str, Any]) -> Model:
    """``body`` (Kubernetes API field names, as in a manifest) as a kubernetes client model, strictly:
    an unknown key or a missing required field raises."""
    return k8s_model_from_dict(model_class, k8s_snake_case_dict(model_class, body))


def env_list(env: dict[str, str]) -> list[dict[str, str]]:
    return [{"name": name, "value": value} for name, value in env.items()]


def same_slice_affinity(labels: dict[str, str]) -> dict[str, Any]:
    """Every pod matching ``labels`` on one node pool: the hosts of one TPU slice, linked by ICI."""
    term = {"labelSelector": {"matchLabels": labels}, "topologyKey": NODE_POOL}
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


@dataclass(frozen=True)
class HostGroup:
    """The pods, Job and Service of one launch on ``hosts`` hosts, named after ``name``."""

    name: str  # the Service's name, every pod's subdomain and the launch label's value
    namespace: str
    hosts: int
    tpu: bool

    @classmethod
    def new(cls, namespace: str, hosts: int, tpu: bool) -> HostGroup:
        """A group with a fresh name: each launch (a retry too) gets its own Job and Service."""
        return cls(f"marin-{uuid.uuid4().hex[:10]}", namespace, hosts, tpu)

    @property
    def workers(self) -> str:
        """The Indexed Job's name; its pods' hostnames are ``<name>-<index>``."""
        return f"{self.name}-workers"

    @property
    def labels(self) -> dict[str, str]:
        return {LAUNCH_LABEL: self.name}

    def hostname(self, process: int) -> str:
        return f"{self.name}-0" if process == 0 else f"{self.workers}-{process - 1}"

    def address(self, process: int) -> str:
        return f"{self.hostname(process)}.{self.name}.{self.namespace}.svc"

    @property
    def coordinator(self) -> str:
        return f"{self.address(0)}:{COORDINATOR_PORT}"

    def shared_env(self) -> dict[str, str]:
        """What every process is told alike."""
        hostnames = ",".join(self.address(p) for p in range(self.hosts))
        return {NUM_PROCESSES: str(self.hosts), COORDINATOR_ADDRESS: self.coordinator, HOSTNAMES: hostnames}

    def leader_env(self) -> dict[str, str]:
        """Process 0's environment (the Pipes pod)."""
        env = {**self.shared_env(), PROCESS_ID: "0"}
        if self.tpu:
            env |= {"TPU_WORKER_ID": "0", "TPU_WORKER_HOSTNAMES": env[HOSTNAMES]}
        return env

    def worker_command(self, command: list[str]) -> list[str]:
        """``command`` behind the preamble that gives a worker its process id from its Job index."""
        preamble = f"export {PROCESS_ID}=$((JOB_COMPLETION_INDEX + 1))"
        if self.tpu:
            preamble += f"; export TPU_WORKER_ID=${PROCESS_ID} TPU_WORKER_HOSTNAMES=${HOSTNAMES}"
        return ["/bin/sh", "-c", f'{preamble}; exec "$@"', "marin-worker", *command]

    def _pod_spec(self, base: dict[str, Any]) -> dict[str, Any]:
        spec = {**base, "subdomain": self.name}
        if self.tpu:
            spec["affinity"] = same_slice_affinity(self.labels)
        return spec

    def leader_pod_spec(self, base: dict[str, Any]) -> dict[str, Any]:
        """``base`` (the launcher's pod spec) for process 0: its DNS name and placement."""
        return {**self._pod_spec(base), "hostname": self.hostname(0)}

    def service(self, owner_uid: str):
        """The headless Service behind the pods' DNS names. It answers before the pods are ready, since
        JAX connects while they start, and belongs to the worker Job (``owner_uid``): should the Dagster
        process die before deleting them, the Job's TTL takes the Service with it."""
        from kubernetes.client import V1Service

        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": self.workers, "uid": owner_uid}
        body = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": self.name, "labels": self.labels, "ownerReferences": [owner]},
            "spec": {
                "clusterIP": "None",
                "selector": self.labels,
                "publishNotReadyAddresses": True,
                "ports": [{"name": "coordinator", "port": COORDINATOR_PORT}],
            },
        }
        return k8s_model(V1Service, body)

    def worker_job(
        self, base: dict[str, Any], command: list[str], deadline_seconds: int, owners: list[dict[str, str]]
    ):
        """The Indexed Job of processes 1 to n-1, each on ``base`` (the launcher's pod spec) running
        ``command``. Its ``owners`` (the run's pod), deadline and TTL remove it should the Dagster process
        die before deleting it."""
        from kubernetes.client import V1Job

        spec = {**self._pod_spec(base), "restartPolicy": "OnFailure"}
        container = dict(spec["containers"][0])
        container["command"] = self.worker_command(command)
        container["env"] = [*container.get("env", []), *env_list(self.shared_env())]
        spec["containers"] = [container]
        body = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": self.workers, "labels": self.labels, "ownerReferences": owners},
            "spec": {
                "completionMode": "Indexed",
                "completions": self.hosts - 1,
                "parallelism": self.hosts - 1,
                "backoffLimit": WORKER_RESTARTS,
                "activeDeadlineSeconds": deadline_seconds,
                "ttlSecondsAfterFinished": 3600,
                "template": {"metadata": {"labels": self.labels}, "spec": spec},
            },
        }
        return k8s_model(V1Job, body)


def jobset(
    name: str, base: dict[str, Any], command: list[str], slices: int, hosts: int, deadline_seconds: int
) -> dict[str, Any]:
    """A JobSet manifest for TPU multislice: ``slices`` slices of ``hosts`` hosts, each pod on ``base``
    (the launcher's pod spec) running ``command``.

    One child Job per slice, each on a node pool of its own (JobSet's exclusive topology); the JobSet
    restarts as a whole when a pod fails (``maxRestarts``), and training resumes from its last checkpoint.
    GKE sets ``TPU_WORKER_*`` per slice; the ``MEGASCALE_*`` variables that join the slices are set here
    from the JobSet's own names, so they hold whether or not the cluster injects them.
    """
    from kubernetes.client import V1JobSpec

    replicated = "slice"
    slice_id = {"fieldRef": {"fieldPath": "metadata.annotations['jobset.sigs.k8s.io/job-index']"}}
    container = dict(base["containers"][0])
    container["command"] = command
    container["env"] = [
        *container.get("env", []),
        *env_list({DISTRIBUTED: "auto", "MEGASCALE_NUM_SLICES": str(slices)}),
        {"name": "MEGASCALE_COORDINATOR_ADDRESS", "value": f"{name}-{replicated}-0-0.{name}"},
        {"name": "MEGASCALE_SLICE_ID", "valueFrom": slice_id},
    ]
    # the host's network for DCN bandwidth between slices, as GKE runs multislice; pod DNS names still resolve
    pod_spec = {
        **base,
        "restartPolicy": "Never",
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "containers": [container],
    }
    job_spec = {
        "completionMode": "Indexed",
        "completions": hosts,
        "parallelism": hosts,
        "backoffLimit": 0,
        "activeDeadlineSeconds": deadline_seconds,
        "template": {"spec": pod_spec},
    }
    k8s_model(V1JobSpec, job_spec)  # the child Jobs are plain Jobs: checked as such
    return {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": {
            "name": name,
            "annotations": {"alpha.jobset.sigs.k8s.io/exclusive-topology": NODE_POOL},
        },
        "spec": {
            "failurePolicy": {"maxRestarts": 3},
            "network": {"enableDNSHostnames": True},
            "replicatedJobs": [{"name": replicated, "replicas": slices, "template": {"spec": job_spec}}],
        },
    }
