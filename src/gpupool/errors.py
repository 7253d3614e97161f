"""One error root. Client errors carry a stable code and a message that says what to do."""

from __future__ import annotations

from typing import Any


class GpupoolError(Exception):
    """Something went wrong in gpupool."""

    status = 500
    code = "internal_error"

    def __init__(self, message: str | None = None, **details: Any) -> None:
        super().__init__(message or self.__doc__ or self.code)
        self.message = message or (self.__doc__ or self.code).strip()
        self.details = details


class ClientError(GpupoolError):
    """The request cannot be done as asked."""

    status = 400
    code = "bad_request"


class InvalidRequest(ClientError):
    """The request is not valid: fix the fields named in the details."""

    status = 422
    code = "invalid_request"


class InvalidWeight(InvalidRequest):
    """A user's weight is a number above 0: 1 is the default, 2 is owed twice the GPU time."""

    code = "invalid_weight"


class UnixUserNotAllowed(InvalidRequest):
    """Jobs cannot run under this Unix account: map the user to an existing, unprivileged one."""

    code = "unix_user_not_allowed"


class InvalidArray(InvalidRequest):
    """A job array's indexes are given as sbatch --array takes them: 0-999, 1,3,5-7 or
    0-99:2, optionally ending in %50 (at most 50 tasks at once), or as a list of indexes."""

    code = "invalid_array"


class GpuTypeWithoutGpus(InvalidRequest):
    """A GPU type picks among the GPUs a job asks for: add --gpus (resources.gpus) or
    --gpu-memory (resources.gpu_memory_bytes), or leave the GPU type out."""

    code = "gpu_type_without_gpus"


class InvalidLauncher(InvalidRequest):
    """A distributed job's launcher is torch (modes per-gpu, the default, or torchrun),
    tensorflow or mpi, with the command to run: fix the launcher, its mode or the GPUs asked."""

    code = "invalid_launcher"


class OffsetOutOfRange(ClientError):
    """The offset is past the end of the log: read from an offset between 0 and its size."""

    status = 416
    code = "offset_out_of_range"


class Unauthenticated(ClientError):
    """Log in first: send 'Authorization: Bearer <token>' or sign in to the web UI."""

    status = 401
    code = "unauthenticated"


class Forbidden(ClientError):
    """Your role does not allow this; ask an admin of the pool."""

    status = 403
    code = "forbidden"


class PriorityNotAllowed(Forbidden):
    """Your role does not allow this priority; submit with a lower one."""

    code = "priority_not_allowed"


class HostNetworkNotAllowed(Forbidden):
    """This pool runs every job on a network of its own: leave network out (or use
    isolated), or ask an admin to allow the node's network (GPUPOOL_ALLOW_HOST_NETWORK)."""

    code = "host_network_not_allowed"


class NotFound(ClientError):
    """No such resource, or not one you can see."""

    status = 404
    code = "not_found"


class Conflict(ClientError):
    """The resource is not in a state that allows this."""

    status = 409
    code = "conflict"


class TeamNotEmpty(Conflict):
    """The team still has pending or running jobs: cancel them or let them end first."""

    code = "team_not_empty"


class DefaultTeamKept(Conflict):
    """The default team cannot be deleted: it is where users without a team submit."""

    code = "default_team"


class LastAdmin(Conflict):
    """The pool would be left without an enabled admin: make another user admin first."""

    code = "last_admin"


class NodeBusy(Conflict):
    """Jobs hold resources on this node: drain it (gpupool node drain NAME), let its jobs end
    or cancel them, then remove it."""

    code = "node_busy"


class OwnNodeKept(Conflict):
    """This is the server's own node: it is part of the pool while the server runs. Drain it
    to keep new work off it (gpupool node drain NAME)."""

    code = "own_node"


class ViewerNotTeamAdmin(Conflict):
    """A viewer cannot be a team admin: give the user the member role first."""

    code = "viewer_not_team_admin"


class WrongPassword(Forbidden):
    """The current password is wrong: type it again, or ask an admin to set a new one."""

    code = "wrong_password"


class GuaranteesExceedPool(Conflict):
    """The teams' guarantees would add up to more GPUs than the pool has."""

    code = "guarantees_exceed_pool"


class LimitBelowGuarantee(InvalidRequest):
    """A team's limit must be at least its guarantee."""

    code = "limit_below_guarantee"


class InvalidTuning(InvalidRequest):
    """A tuning of the scheduler's settings cannot run as asked: fix the option named (an
    objective, a guard, a window, the trials or the workers)."""

    code = "invalid_tuning"


class Unsatisfiable(ClientError):
    """No node of the pool can ever run this request: ask for less."""

    status = 422
    code = "unsatisfiable"


class UnknownTeam(ClientError):
    """No such team: list teams with 'gpupool teams'."""

    status = 422
    code = "unknown_team"


class CsrfFailed(ClientError):
    """The CSRF token is missing or wrong: reload the page and try again."""

    status = 403
    code = "csrf_failed"


class UpstreamUnavailable(GpupoolError):
    """The workload behind this address does not answer (it may be starting, stopping or
    gone): check its state with 'gpupool ls' or on its page, then try again."""

    status = 502
    code = "upstream_unavailable"


class UpstreamRefused(UpstreamUnavailable):
    """The workload behind this address refused the connection (nothing was sent to it): it
    may be starting, stopping or gone."""


class UpstreamTimeout(GpupoolError):
    """The workload behind this address took too long to answer: try again, or look at its
    logs to see whether it is stuck."""

    status = 504
    code = "upstream_timeout"


class HostNotAllowed(ClientError):
    """This server does not answer to that host name: open it at an allowed address (such as
    127.0.0.1 or its public URL), or add the name to GPUPOOL_ALLOWED_HOSTS."""

    code = "host_not_allowed"


class TooManyAttempts(ClientError):
    """Too many failed sign-ins: wait, then try again."""

    status = 429
    code = "too_many_attempts"

    def __init__(self, retry_after: int) -> None:
        super().__init__(
            f"too many failed sign-ins from this address or for this user: try again in "
            f"{retry_after} seconds",
            retry_after_seconds=retry_after,
        )
        self.retry_after = retry_after


class PayloadTooLarge(ClientError):
    """The request body is too large."""

    status = 413
    code = "payload_too_large"


class WorkdirNotAllowed(InvalidRequest):
    """This working directory cannot be used: give an absolute path of your own."""

    code = "workdir_not_allowed"


class CodeTooLarge(ClientError):
    """The code snapshot is larger than this server takes: leave big files out with a
    .gpupoolignore (gitignore syntax), or keep the code on a shared file system and give its
    path with --workdir."""

    status = 413
    code = "code_too_large"


class BadCodeArchive(InvalidRequest):
    """A code snapshot is a gzip-compressed tar archive of regular files and directories with
    relative paths (no links, devices, absolute paths or '..'): pack it with gpupool run
    --code, or tar czf code.tar.gz -C DIR ."""

    code = "bad_code_archive"


class CodeHashMismatch(InvalidRequest):
    """The archive's SHA-256 is not the one in the URL: upload it under sha256:<its hash>."""

    code = "code_hash_mismatch"


class CodeWithWorkdir(InvalidRequest):
    """A job runs in its code snapshot or in a working directory on the node, not both: give
    either code or workdir."""

    code = "code_with_workdir"


class InvalidNetwork(InvalidRequest):
    """A job over several nodes uses the nodes' network (its tasks talk over NCCL, RDMA or
    MPI between nodes): leave network out, or run it on one node."""

    code = "invalid_network"


class CodeNotFound(NotFound):
    """No such code snapshot that you may use: upload it first (gpupool run --code does),
    each user once; a team member's upload is yours to use in that team's jobs."""

    code = "code_not_found"


class StorageFull(GpupoolError):
    """The server's disk is full, so nothing was recorded: free space where gpupool keeps
    its data, then try again."""

    status = 507
    code = "storage_full"


class DatasetStoreUnavailable(GpupoolError):
    """The S3-compatible dataset store cannot be used (the boto3 client is not installed,
    the bucket is not set, or the store does not answer): install gpupool[s3], check the
    GPUPOOL_DATASETS_S3_* settings and the server's AWS credentials, then try again."""

    status = 503
    code = "dataset_store_unavailable"


class StorageQuotaExceeded(ClientError):
    """Your team's files take more than its storage quota, so the server writes no more for
    it: delete outputs or model versions it no longer needs, or ask an admin for a larger
    quota (gpupool team set-quota --storage)."""

    status = 403
    code = "storage_quota_exceeded"


class SchemaMismatch(GpupoolError):
    """The database schema does not match this gpupool version."""

    code = "schema_mismatch"


class DataDirInUse(GpupoolError):
    """Another gpupool server uses this data directory: stop it first, or give this server a
    directory of its own (--data-dir or GPUPOOL_DATA_DIR)."""

    status = 409
    code = "data_dir_in_use"


class NotAPool(ClientError):
    """This server runs one machine: machines join a server started with --ray."""

    status = 409
    code = "not_a_pool"


class NoHealthyReplica(GpupoolError):
    """The deployment has no healthy replica to answer right now (it may be starting,
    restarting or stopped): try again shortly, and see its replicas with 'gpupool deploy
    show NAME'."""

    status = 503
    code = "no_healthy_replica"

    def __init__(self, message: str | None = None, retry_after: int = 2) -> None:
        super().__init__(message, retry_after_seconds=retry_after)
        self.retry_after = retry_after


class DeploymentExists(Conflict):
    """A deployment of that name runs already in this team: a name is unique in its team
    (it is its address, /serve/NAME/...). Choose another with --name, or update that one."""

    code = "deployment_exists"


class DeploymentStopped(Conflict):
    """The deployment is stopped: deploy it again to serve it."""

    code = "deployment_stopped"


class AmbiguousDeployment(Conflict):
    """Deployments of several of your teams have this name: say which team's (--team, or
    the address /serve/NAME@TEAM/)."""

    code = "ambiguous_deployment"


class ModelNotUsable(NotFound):
    """No such model version that this job's team may use: register it in that team
    ('gpupool model register'), or deploy in the team that owns it."""

    code = "model_not_usable"


class AmbiguousModel(InvalidRequest):
    """Models of several of your teams have this name: say which with --team."""

    code = "ambiguous_model"


class InvalidModelName(InvalidRequest):
    """A model's name is 1 to 100 letters, digits, '.', '_' or '-', starting with a letter or
    a digit."""

    code = "invalid_model_name"


class BadModelPath(InvalidRequest):
    """A model version is made of regular files inside the job's outputs: give a relative
    path there (no '..', no absolute path), and leave out links that lead outside the outputs
    and special files (FIFOs, sockets, devices)."""

    code = "bad_model_path"


class SourceJobNotEnded(Conflict):
    """The job has not ended, so its outputs may be half written: register once it has
    ended."""

    code = "job_not_ended"


class SourceJobNotSucceeded(Conflict):
    """The job did not succeed: register from a job that succeeded, or add --allow-failed
    (allow_failed) to take what an ended job left all the same."""

    code = "job_not_succeeded"


class NoModelFiles(Conflict):
    """The job left no files there: a job writes what it makes into $GPUPOOL_OUTPUT_DIR."""

    code = "no_model_files"


class ModelTooLarge(ClientError):
    """The files are more than this server keeps in one model version
    (GPUPOOL_MAX_MODEL_BYTES, GPUPOOL_MAX_MODEL_FILES): register a sub directory with
    --path, or ask an admin to raise the limit."""

    status = 413
    code = "model_too_large"


class OutputsUnreachable(ClientError):
    """The node that holds the job's outputs cannot be reached now: try again once it is
    back (gpupool nodes)."""

    status = 503
    code = "outputs_unreachable"


class NotebookNotRunning(ClientError):
    """The notebook is not running: resume it (gpupool notebook resume ID), or wait while it
    starts (gpupool notebook show ID says where it stands)."""

    status = 503
    code = "notebook_not_running"


class NotebookActive(Conflict):
    """The notebook runs, or is still stopping: stop it first, or wait until it has stopped."""

    code = "notebook_active"


class UnknownDependency(InvalidRequest):
    """A job this job is to depend on is not a job of its team: give the id or the name of a
    job of that team ('gpupool ls --team TEAM' lists them)."""

    code = "unknown_dependency"


class AmbiguousDependency(InvalidRequest):
    """Several jobs of the team that have not ended bear this name: depend on one by its id
    ('gpupool ls' lists them)."""

    code = "ambiguous_dependency"


class InvalidDatasetName(InvalidRequest):
    """A dataset's or a volume's name is 1 to 100 letters, digits, '.', '_' or '-', starting
    with a letter or a digit."""

    code = "invalid_dataset_name"


class BadManifest(InvalidRequest):
    """A dataset manifest lists regular files with relative paths inside the version (no
    absolute path, no '..', each once, none below another file), each with its size, mode
    and SHA-256: gpupool dataset create --from DIR writes one."""

    code = "bad_manifest"


class DatasetTooLarge(ClientError):
    """The version holds more than this server keeps in one (GPUPOOL_MAX_DATASET_BYTES,
    GPUPOOL_MAX_DATASET_FILES): split it into several datasets, or ask an admin to raise the
    limits."""

    status = 413
    code = "dataset_too_large"


class BlobHashMismatch(InvalidRequest):
    """The bytes received do not have the SHA-256 in the URL: upload each file under the
    hash of its bytes."""

    code = "blob_hash_mismatch"


class BlobsMissing(Conflict):
    """Some of the version's files were not uploaded: upload the blobs named (gpupool dataset
    create does), then commit again."""

    code = "blobs_missing"


class DatasetInUse(Conflict):
    """Jobs that have not ended use this version: wait for them, or cancel them, then delete
    it."""

    code = "dataset_in_use"


class AmbiguousDataset(InvalidRequest):
    """Several of your teams have a dataset (or a volume) of this name: say which with
    --team."""

    code = "ambiguous_dataset"


class VolumeExists(Conflict):
    """The team has a volume of this name already: pick another name, or use that one."""

    code = "volume_exists"


class VolumeInUse(Conflict):
    """Jobs that have not ended mount this volume: wait for them, or cancel them, then
    delete it."""

    code = "volume_in_use"


class VolumeFull(Conflict):
    """The volume's files take more than its size (as the storage scan last measured them),
    so no new job mounts it: give it a larger size (apply a Volume document with a larger
    size: gpupool apply -f), then have a job delete what it no longer needs; or delete the
    volume (gpupool volume rm)."""

    code = "volume_full"


class ImageNotFound(NotFound):
    """No such image that you can use: list them with 'gpupool image ls', or pull it with
    'gpupool image pull REF' (import an archive with 'gpupool image import FILE.tar')."""

    code = "image_not_found"


class InvalidImageName(InvalidRequest):
    """An image is named [registry/]path[:tag][@sha256:...] as docker names it, or by its
    digest (sha256: and 64 hex digits) as 'gpupool image ls' lists it."""

    code = "invalid_image_name"


class RegistryNotAllowed(ClientError):
    """Images are pulled only from the registries this site allows (GPUPOOL_IMAGE_REGISTRIES):
    pull from one of them, import the image as an archive ('gpupool image import'), or ask an
    admin to allow the registry."""

    status = 403
    code = "registry_not_allowed"


class ImagePullFailed(ClientError):
    """The registry did not give the image: check its name and tag (skopeo's message says
    what the registry answered), and that the registry is up."""

    status = 422
    code = "image_pull_failed"


class BadImageArchive(InvalidRequest):
    """The upload is not an image archive: give an OCI archive or what 'docker save' writes
    (one image), as a .tar."""

    code = "bad_image_archive"


class ImageTooLarge(ClientError):
    """The image archive is larger than this server takes (GPUPOOL_MAX_IMAGE_BYTES): pull it
    from a registry the site allows, or ask an admin to raise the limit."""

    status = 413
    code = "image_too_large"


class ImageInUse(Conflict):
    """Jobs that have not ended run in this image: wait for them, or cancel them, then remove
    it."""

    code = "image_in_use"


class ImagesUnavailable(ClientError):
    """This server cannot fetch or unpack images: skopeo and umoci are not installed on it
    (scripts/install-system-deps.sh serve installs them); ask an admin."""

    status = 503
    code = "images_unavailable"


class ImageNeedsSandbox(Conflict):
    """A job runs in an image only in a sandbox, and this server runs jobs unsandboxed
    (GPUPOOL_ISOLATION=off): run it without --image, or ask an admin to turn isolation on."""

    code = "image_needs_sandbox"


def invalid_with_code(code: str) -> type[InvalidRequest]:
    """The 422 whose stable code is ``code`` (a validation problem of a type that is a code of
    its own, such as gpu_type_without_gpus, keeps it); InvalidRequest for any other."""
    found: list[type[InvalidRequest]] = [InvalidRequest]
    while found:
        cls = found.pop()
        if cls.code == code:
            return cls
        found.extend(cls.__subclasses__())
    return InvalidRequest


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    """An error as every answer of the platform carries it (``{"error": {...}}``)."""
    return {"error": {"code": code, "message": message, "details": details or {}}}


# -- Python environments (docs/environments.md) ------------------------------------------------


class EnvironmentNotFound(NotFound):
    """No such environment, or none you can see: list them with 'gpupool env ls'. Its code
    is ``not_found``, as for anything another team has: whether it exists is not told."""


class AmbiguousEnvironment(InvalidRequest):
    """Environments of several of your teams have this name (or several versions start with
    this id): say which with --team (or give more of the id)."""

    code = "ambiguous_environment"


class InvalidEnvironment(InvalidRequest):
    """An environment's name, Python or packages are not what gpupool can build: the message
    says what to change."""

    code = "invalid_environment"


class EnvironmentUnresolvable(InvalidRequest):
    """The packages could not be resolved against the site's package index: uv's message
    says which, and why."""

    code = "environment_unresolvable"


class PythonUnavailable(InvalidRequest):
    """No interpreter of that Python version is installed here (none is downloaded)."""

    code = "python_unavailable"


class EnvironmentInUse(Conflict):
    """Jobs that are pending or running use this environment: cancel them, or let them end."""

    code = "environment_in_use"


# -- Kubeflow manifests (docs/kubeflow.md) -----------------------------------------------------


class KubeflowInvalid(InvalidRequest):
    """A Kubeflow manifest's field is not what its operator reads (a number where a list is
    due, a replica type it lacks): the message names the field and what it takes."""

    code = "kubeflow_invalid"


class KubeflowNotSupported(InvalidRequest):
    """The manifest asks for what gpupool cannot do for it (a sidecar container, an init
    container, a volume of a kind it has no equivalent for): the message says what to change."""

    code = "kubeflow_not_supported"


class TfPsNotSupported(KubeflowNotSupported):
    """A TFJob with parameter servers (PS replicas): gpupool runs TensorFlow's
    MultiWorkerMirroredStrategy (Chief and Workers) only; drop the PS replicas and use that
    strategy."""

    code = "tf_ps_not_supported"


class ElasticNotSupported(KubeflowNotSupported):
    """Elastic training (elasticPolicy, or minAvailable below the replicas): a gpupool job over
    several nodes starts all its nodes together and keeps them; give a fixed number of
    replicas."""

    code = "elastic_not_supported"


class ImageNotAvailable(InvalidRequest):
    """The manifest's container image is not a gpupool image of the job's team or the site:
    pull it ('gpupool image pull REF') or import it, or run on the nodes' own system with
    'gpupool apply --ignore-image' (ignore_image in the API)."""

    code = "image_not_available"


class UnknownPriorityClass(InvalidRequest):
    """The manifest's priorityClassName is not one this site maps to a priority
    (GPUPOOL_PRIORITY_CLASSES): use one it maps, or leave it out."""

    code = "unknown_priority_class"


class UnknownRuntime(InvalidRequest):
    """A TrainJob's runtimeRef names no runtime gpupool knows: use a built-in one
    (torch-distributed, deepspeed-distributed, mpi-distributed) or define the
    (Cluster)TrainingRuntime in the same file."""

    code = "unknown_runtime"


class KubeflowCommandMissing(InvalidRequest):
    """The container gives no command and leaves it to its image, which is not a gpupool image
    whose entrypoint is known: give the container a command, or pull the image."""

    code = "kubeflow_command_missing"


class ClaimNotFound(InvalidRequest):
    """A persistentVolumeClaim names neither a volume nor a dataset of the job's team: make
    the volume ('gpupool volume create NAME') or the dataset, or name one the team has."""

    code = "claim_not_found"


class KatibAlgorithmNotSupported(KubeflowNotSupported):
    """A Katib Experiment's search or early-stopping algorithm is not one gpupool runs: use
    random, grid, tpe, multivariate-tpe, cmaes or sobol, and medianstop (or none)."""

    code = "katib_algorithm_not_supported"
