"""One typed settings object, read from GPUPOOL_* environment variables and passed in."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from gpupool.domain.arrays import MAX_ARRAY_TASKS
from gpupool.domain.code import CodeLimits
from gpupool.domain.policy import DEFAULT_POLICY, Policy
from gpupool.domain.units import parse_bytes

DEFAULT_PORT = 8765
# Bind addresses that mean "every interface": no Host header names them.
WILDCARD_ADDRESSES = frozenset({"0.0.0.0", "::", ""})


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "gpupool"


class Settings(BaseSettings):
    """Server settings. Every path is derived from ``data_dir`` unless given."""

    model_config = SettingsConfigDict(env_prefix="GPUPOOL_", extra="ignore")

    data_dir: Path = Field(default_factory=default_data_dir)
    database_url: str | None = None  # default: SQLite file in data_dir
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    node_name: str | None = None  # default: the host name
    # The node's fabric group (gpupool node join --fabric-group); default: derived from its
    # RDMA fabric or its IP subnet. A job over several nodes keeps to one group.
    fabric_group: str | None = None
    # Declared inventory, used where no NVIDIA driver answers: "4xA100-SXM4-80GB:80GiB".
    declared_gpus: str | None = None
    # Links between the declared GPUs, as nvidia-smi topo -m names them: "0-1:NV4,2-3:PIX".
    declared_links: str | None = None
    declared_cpus: int | None = None
    declared_memory: str | None = None
    sysfs_root: Path = Path("/sys")
    use_nvml: bool = True
    log_limit_bytes: int = 64 * 1024**2
    stop_grace_seconds: float = 30.0  # SIGTERM to SIGKILL, unless a job sets its own
    max_grace_seconds: float = 3600.0  # the longest grace period a job may ask for
    member_max_priority: int = 100  # members submit in [-1000, this]; admins up to 1000
    # A Kubeflow manifest's priority class (priorityClassName, Kueue's priority-class label)
    # -> the job's priority, as JSON: '{"high": 100, "low": -100}' (docs/kubeflow.md). A
    # class not in it is refused (unknown_priority_class); a member's cap above still holds.
    priority_classes: dict[str, int] = Field(default_factory=dict)
    # Fair share inside a team weighs past GPU-seconds down by half every this many seconds
    # (Slurm's PriorityDecayHalfLife); the usage is recomputed at most every few seconds.
    fair_share_half_life_seconds: float = 7 * 86400.0
    usage_refresh_seconds: float = 5.0
    # A job runs at least this long before least-attained service or a priority may preempt
    # it (a guarantee's reclaim does not wait); see docs/scheduling.md for the trade-off.
    min_runtime_seconds: float = Field(default=0.0, ge=0.0)
    # Where a GPU task goes: "fgd" (least growth of fragmentation) or "best-fit".
    packing: Literal["fgd", "best-fit"] = "fgd"
    # A job that fetches an environment, dataset version or image goes, among the spots it
    # fits now, to the node that holds most of it (docs/scheduling.md, "Locality").
    locality: bool = True
    # Tuning the scheduler's settings by replays of the pool's history (docs/scheduling.md,
    # "Self-tuning"): the processes a tuning's replays use; "nightly": a tuning that may adopt
    # runs every night at autotune_hour (the server's local time); the rollback watch judges an
    # adopted tuning this long after it; the tuning watch looks for work this often.
    tune_workers: int = Field(default=max(1, min(4, (os.cpu_count() or 2) // 2)), ge=1, le=64)
    autotune: Literal["off", "nightly"] = "off"
    autotune_hour: int = Field(default=3, ge=0, le=23)
    autotune_check_seconds: float = Field(default=7 * 86400.0, gt=0)
    tuning_scan_seconds: float = Field(default=30.0, gt=0)
    # Bounded work per cycle (docs/scheduling.md, "Bounded cycles"): a cycle hands its starts
    # over this many at a time as it goes, and after this many jobs of one user could not
    # start it tries no more of that user's; 0: no bound.
    cycle_max_starts: int = Field(default=DEFAULT_POLICY.max_starts, ge=0)
    cycle_max_tries: int = Field(default=DEFAULT_POLICY.max_tries, ge=0)
    # The reasons of the jobs left pending are worked out at most this often (explaining a
    # long queue costs more than deciding); the cycles between decide only. 0: every cycle.
    explain_interval_seconds: float = Field(default=1.0, ge=0.0)
    checkpoint_scan_seconds: float = 5.0  # how often a running job's checkpoints are looked at
    # How often the nodes are asked what they hold of environments, dataset versions and
    # images (placement prefers a node that holds a job's); also soon after attempts change.
    holdings_scan_seconds: float = Field(default=10.0, gt=0)
    # -- storage (docs/scheduling.md): teams' storage quotas and the database's reserve --------
    # How often each team's files are summed; a team past its quota has its running jobs
    # stopped (StorageQuotaExceeded) at the scan that finds it there.
    storage_scan_seconds: float = Field(default=10.0, gt=0)
    # Bytes kept free for the server's own database: a file of this size in the data
    # directory (at most a twentieth of its disk), given back when the disk's free space
    # falls under `disk_low_bytes`, so that its writes (and so every read) go on.
    disk_reserve_bytes: int = Field(default=256 * 1024**2, ge=0)
    disk_low_bytes: int = Field(default=64 * 1024**2, ge=0)
    max_body_bytes: int = 1024**2
    # -- code snapshots (docs/jobs.md): a job's working directory sent with it -------------
    # The most an archive may be (gzip-compressed), the bytes of the files it unpacks to, and
    # its entries (files and directories); the client checks the first before it uploads.
    max_code_bytes: int = Field(default=100 * 1024**2, ge=1)
    max_code_unpacked_bytes: int = Field(default=1024**3, ge=1)
    max_code_entries: int = Field(default=100_000, ge=1)
    # -- the model registry (docs/models.md): the most one model version may hold ----------
    max_model_bytes: int = Field(default=10 * 1024**3, ge=1)  # its files' bytes
    max_model_files: int = Field(default=100_000, ge=1)  # its files and directories
    # -- datasets and volumes (docs/datasets.md) ------------------------------------------
    # The dataset store (a POSIX directory: local, or NFS, CephFS, Lustre shared by the
    # nodes; default: the data directory's "datasets"), the most one version may hold, and
    # where each node keeps the versions it materialised (default: data dir's dataset-cache)
    datasets_store: Path | None = None
    max_dataset_bytes: int = Field(default=100 * 1024**3, ge=1)
    max_dataset_files: int = Field(default=1_000_000, ge=1)
    dataset_cache: Path | None = None
    # What each node's cache of versions may take (as du counts it: files linked from the
    # store count once); past it, after a version is materialised, the least recently used
    # versions no job holds are removed (a later job of one materialises it again). 0: none.
    dataset_cache_max_bytes: int = Field(default=0, ge=0)
    # An S3-compatible object store for the dataset store instead of the POSIX one, when
    # the endpoint is set (e.g. http://127.0.0.1:9000; gpupool[s3]): its bucket, the prefix
    # of gpupool's keys there, its region. Credentials: the standard AWS chain of the
    # server's and each node's account (never kept by gpupool, never given to jobs).
    datasets_s3_endpoint: str = ""
    datasets_s3_bucket: str = ""
    datasets_s3_prefix: str = "gpupool/"
    datasets_s3_region: str = "us-east-1"
    # Blobs no dataset version references are removed from the store every
    # dataset_gc_seconds, once unchanged for dataset_blob_grace_seconds: an upload's blobs
    # wait that long for their version's commit (a slow upload of a big version included).
    dataset_gc_seconds: float = Field(default=600.0, gt=0)
    dataset_blob_grace_seconds: float = Field(default=86_400.0, ge=0)
    # The teams' volumes (default: the data directory's "volumes"). On a pool it must be a
    # file system every node shares, mounted at the same path (the server tells each node
    # where, with each job): a volume is then the same directory whichever node a job of it
    # lands on, and the server measures it for the team's storage quota.
    volumes_store: Path | None = None
    # -- Python environments (docs/environments.md) ---------------------------------------
    # Where each node builds and keeps the environments its jobs use (default: the data
    # directory's "envs"), with uv's cache beside them: an env's files are hard links into
    # it, so envs that share packages share their bytes.
    envs_store: Path | None = None
    # What they may take on a node (with uv's cache and their bytecode); past it, after a
    # build, the least recently used environments no job uses are removed (a later job of
    # one builds it again), then uv's download cache is cleared. 0: no limit.
    envs_max_bytes: int = Field(default=0, ge=0)
    # The package index environments are resolved (on the server) and built (on each node)
    # from: "pip" reads the machine's pip configuration (index-url, extra-index-url,
    # find-links, no-index), else an index URL; the extra index URLs and find-links
    # locations (space- or comma-separated) and no-index add to it.
    env_index_url: str = "pip"
    env_extra_index_urls: str = ""
    env_find_links: str = ""
    env_no_index: bool = False
    # Packages with no wheel for the platform are built from source only where allowed: a
    # source build runs the package's own code (on the server when resolving, too).
    env_allow_source_builds: bool = False
    env_resolve_timeout_seconds: float = Field(default=300.0, gt=0)
    env_build_timeout_seconds: float = Field(default=1800.0, gt=0)
    # A job that asks for GPUs, placed on a node that lacks its environment, does not start
    # there holding its GPUs while the node builds it: a CPU-only build job of its team
    # (kind envbuild) builds it on that node with at most these CPUs and this memory, and
    # the job waits for it (reason EnvBuilding), leaving the GPUs to others. False: the job's
    # own start builds it.
    env_build_jobs: bool = True
    env_build_cpus: float = Field(default=2.0, gt=0)
    env_build_memory_bytes: int = Field(default=4 * 1024**3, gt=0)
    # -- container images (docs/images.md) ---------------------------------------------------
    # Registries images are pulled from, comma-separated host[:port]; "=insecure" after one
    # pulls from it over plain HTTP or TLS no CA signs (a registry on the site's own network).
    # Empty: no pulls (an image archive can still be imported).
    image_registries: str = ""
    # Where the server keeps images (an OCI layout per image) and each node its unpacked
    # trees (default: the data directory's "images"), the largest archive an import takes,
    # and how long a pull may take.
    images_store: Path | None = None
    max_image_bytes: int = Field(default=20 * 1024**3, ge=1)
    image_pull_timeout_seconds: float = Field(default=1800.0, gt=0)
    # The most tasks one job array may have (sbatch's MaxArraySize); every task is a job.
    max_array_tasks: int = Field(default=10_000, ge=1, le=MAX_ARRAY_TASKS)
    # -- notebooks (docs/notebooks.md) -----------------------------------------------------
    # A running notebook with GPUs whose kernels were idle and whose GPUs were unused for this
    # long is stopped, to give its GPUs back (its files stay; resume starts it again).
    notebook_idle_seconds: float = Field(default=1800.0, gt=0)
    schedule_interval_seconds: float = 0.5  # the loop also wakes at once on every change
    discovery_interval_seconds: float = 30.0  # re-discovery of this node; 0: only at start
    session_hours: float = 12.0
    # -- deployments (docs/deployments.md): health checks and replacements of replicas ---
    deploy_health_interval_seconds: float = Field(default=2.0, gt=0, le=3600)
    deploy_unhealthy_after: int = Field(default=3, ge=1)  # failed checks in a row: replaced
    deploy_startup_seconds: float = Field(default=600.0, gt=0)  # to pass a first check
    deploy_drain_seconds: float = Field(default=1.0, ge=0)  # routed no more, then stopped
    deploy_max_backoff_seconds: float = Field(default=60.0, gt=0)  # between restarts
    # -- sign-in and network exposure (docs/security.md) -----------------------------------
    # The address users reach the server at, e.g. https://gpu.example.com: its host is allowed
    # in the Host header, and an https URL makes the session cookie Secure.
    public_url: str | None = None
    # More host names the Host header may carry (comma-separated), besides the bound address,
    # 127.0.0.1, localhost, ::1 and public_url's host; anything else is refused (DNS rebinding).
    allowed_hosts: str = ""
    # Failed sign-ins (and unknown API tokens) allowed in a moving window of this many seconds,
    # per user name and per client address; past them the server answers 429 until the window
    # lets one more in, even to the right password.
    # A valid token, session or key is never refused (the rules: services.identity's throttle).
    signin_window_seconds: int = Field(default=300, ge=1)
    signin_max_per_user: int = Field(default=10, ge=1)
    signin_max_per_address: int = Field(default=30, ge=1)
    # -- a pool of several nodes on Ray (docs/cluster.md) ---------------------------------
    # "gpupool server --ray" starts a Ray head on `host` at this port; ray_address attaches to
    # a running cluster instead (host:port of its GCS). Every Ray process of the pool shares
    # one secret (Ray token authentication), kept in ray_token_file (default: in data_dir).
    ray: bool = False
    ray_address: str | None = None
    ray_port: int = Field(default=6380, ge=1024, le=65535)
    ray_token_file: Path | None = None
    # The server's own machine is a node of the pool too (its Ray head runs jobs).
    ray_head_node: bool = True
    # Ray's health checks: a node that misses `ray_health_failures` checks made every
    # `ray_health_period_ms` is declared dead (about 1.5 s with these values).
    ray_health_period_ms: int = Field(default=500, ge=100)
    ray_health_failures: int = Field(default=3, ge=1)
    ray_object_store_bytes: int = Field(default=80 * 1024**2, ge=78 * 1024**2)
    # A node that cannot reach the head for this long stops its own work; the server hands
    # out that node's GPUs only after this much time has passed since it lost the node.
    node_lost_seconds: float = Field(default=30.0, gt=0)
    # Secret that lets a machine join the pool (gpupool node join --token); default: made
    # at the first start and kept in data_dir/cluster/join-token.
    join_token: str | None = None
    # -- tenancy (README "Isolation") -------------------------------------------------------
    # "on": every job runs in a bubblewrap sandbox; "off" (explicit only): unsandboxed, and
    # the server says so at start and on the cluster page.
    isolation: Literal["on", "off"] = "on"
    bwrap_path: str = "bwrap"  # looked up on PATH unless absolute
    # System paths every sandbox shows read-only (a missing one is skipped), then an admin's
    # own (comma-separated), and paths shared read-write with every job (datasets, scratch).
    sandbox_system_paths: str = (
        "/usr,/bin,/sbin,/lib,/lib32,/lib64,/libx32,/etc,/opt,/sys,/run/systemd/resolve"
    )
    sandbox_readonly_paths: str = ""
    sandbox_readwrite_paths: str = ""
    # The Python installation the server runs on is shown read-only, so that `python` works.
    sandbox_show_python: bool = True
    device_dir: Path = Path("/dev")  # where /dev/nvidia* are (tests use stand-in files)
    # As root: the account of users who have none of their own, created when missing, and
    # whether each user gets an account of their own (gp-<user>) instead.
    job_account: str = "gpupool-job"
    create_unix_users: bool = False
    # A fractional job is stopped after this long over its GPU memory share; "nvml" samples
    # the memory per process, "file:PATH" reads {uuid: {pid: bytes}} (a stand-in for tests).
    gpu_memory_grace_seconds: float = Field(default=5.0, ge=0.0)
    gpu_memory_sampler: str = "nvml"
    # Every job's limits (docs/isolation.md): the tasks (processes and threads) it may hold
    # at once, and its host memory when it asks for none with --memory ("8GiB"; unset: the
    # node's memory divided by its GPUs, or all of it on a node without GPUs).
    job_pids_max: int = Field(default=4096, ge=16)
    job_default_memory: str | None = None
    mps_pipe_directory: Path = Path("/tmp/nvidia-mps")  # CUDA_MPS_PIPE_DIRECTORY
    # A root node turns the kernel's cgroup favordynmods on while it runs (docs/isolation.md):
    # moving a job's sandbox into its cgroup then no longer waits for an RCU grace period
    # (~10 ms of each start on cgroup v1), for slightly slower forks and exits node-wide.
    cgroup_fast_moves: bool = True
    # Networks (docs/isolation.md): every sandboxed job on one node gets a network namespace
    # of its own, with egress through pasta (Debian's passt; none where it is missing);
    # "off" keeps every job on the node's network. Whether a job may ask for the node's
    # network (network: host) is the admin's call: admins' own jobs always may.
    network_isolation: Literal["on", "off"] = "on"
    pasta_path: str = "pasta"  # looked up on PATH unless absolute
    allow_host_network: bool = False
    # Namespaces a root node keeps ready with egress attached, so that a job starts
    # without waiting for pasta (20-40 ms); 0 makes each job's namespace at its start.
    warm_networks: int = Field(default=2, ge=0, le=16)

    @field_validator("priority_classes")
    @classmethod
    def _priorities(cls, classes: dict[str, int]) -> dict[str, int]:
        wrong = [name for name, value in classes.items() if not -1000 <= value <= 1000]
        if wrong:
            raise ValueError(f"a priority is -1000 to 1000: {', '.join(wrong)} is not")
        return classes

    @field_validator("public_url")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        parts = urlsplit(url or "")
        if url and (parts.scheme not in ("http", "https") or not parts.hostname):
            raise ValueError("give the URL users open, such as https://gpu.example.com")
        return url or None

    @field_validator("job_default_memory")
    @classmethod
    def _byte_quantity(cls, text: str | None) -> str | None:
        if text:
            parse_bytes(text)  # ValueError says how to write it
        return text or None

    def policy(self) -> Policy:
        """The scheduling policy these settings give (the product's defaults otherwise)."""
        return replace(
            DEFAULT_POLICY,
            min_runtime=self.min_runtime_seconds,
            usage_half_life=self.fair_share_half_life_seconds,
            packing=self.packing,
            locality=self.locality,
            max_starts=self.cycle_max_starts,
            max_tries=self.cycle_max_tries,
        )

    @property
    def database(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'gpupool.db'}"

    @property
    def jobs_dir(self) -> Path:
        return self.data_dir / "jobs"

    @property
    def api_socket(self) -> Path:
        """The server's Unix socket (mode 0600): the API for jobs with a network of their
        own, relayed to their loopback by their runners (``runner.bridge``)."""
        return self.data_dir / "api.sock"

    @property
    def code_dir(self) -> Path:
        """Code snapshots, each stored once: ``sha256/<hex>.tar.gz``."""
        return self.data_dir / "code"

    def code_limits(self) -> CodeLimits:
        return CodeLimits(self.max_code_bytes, self.max_code_unpacked_bytes, self.max_code_entries)

    @property
    def images_dir(self) -> Path:
        """The image store: ``oci/<hex>/`` (one OCI layout per image, by manifest digest),
        ``roots/<hex>/`` (this node's unpacked trees) and ``incoming/`` (pulls, imports)."""
        return self.images_store or self.data_dir / "images"

    @property
    def models_dir(self) -> Path:
        """The model store: each version's files as one archive, ``sha256/<hex>.tar.gz``."""
        return self.data_dir / "models"

    def model_limits(self) -> CodeLimits:
        """What one model version may hold, as the archive limits its nodes unpack it with."""
        # tar headers and gzip's own overhead on incompressible files, beyond the files' bytes
        allowance = 1024 * (self.max_model_files + 2) + self.max_model_bytes // 100
        return CodeLimits(
            self.max_model_bytes + allowance, self.max_model_bytes, self.max_model_files
        )

    @property
    def datasets_dir(self) -> Path:
        """The dataset store: ``blobs/<2 hex>/<hex>``, each file's bytes (and each version's
        manifest) kept once by SHA-256."""
        return self.datasets_store or self.data_dir / "datasets"

    @property
    def dataset_cache_dir(self) -> Path:
        """This node's materialised versions: ``<manifest hex>/``, read-only, shared by
        the jobs that read them."""
        return self.dataset_cache or self.data_dir / "dataset-cache"

    @property
    def volumes_dir(self) -> Path:
        """The teams' volumes: ``<volume id>/``, each a job's read-write directory (on a
        pool, a path every node shares)."""
        return self.volumes_store or self.data_dir / "volumes"

    @property
    def envs_dir(self) -> Path:
        """This node's environments: ``<hex>/`` each (read-only once built), and uv's cache
        in ``.uv-cache``."""
        return self.envs_store or self.data_dir / "envs"

    @property
    def cluster_dir(self) -> Path:
        """The Ray side's files: its secret, its head's state, this machine's node agent."""
        return self.data_dir / "cluster"

    @property
    def ray_enabled(self) -> bool:
        return self.ray or self.ray_address is not None

    @property
    def isolated(self) -> bool:
        return self.isolation == "on"

    @property
    def is_sqlite(self) -> bool:
        return self.database.startswith("sqlite")

    @property
    def secure_cookies(self) -> bool:
        """Users reach the server over HTTPS, so its cookies go over HTTPS only."""
        return (self.public_url or "").lower().startswith("https://")

    def host_names(self) -> frozenset[str]:
        """The names a request's Host header may carry (lower case, without port)."""
        names = {"127.0.0.1", "localhost", "::1"}
        if self.host not in WILDCARD_ADDRESSES:
            names.add(self.host.strip("[]").lower())
        if self.public_url:
            names.add((urlsplit(self.public_url).hostname or "").lower())
        names.update(n.strip().strip("[]").lower() for n in self.allowed_hosts.split(","))
        return frozenset(names - {""})
