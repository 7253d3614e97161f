"""What placement weighs of locality, read from a real database (SQLite and PostgreSQL): the
nodes' holdings, a pending job's wants with their sizes, the node that a placed job's fetch
will fill, and the held keys kept with a placement."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import update

import gpupool.services.identity._quotas as quotas
import gpupool.services.identity._users as users
from gpupool.domain.inventory import NodeInventory
from gpupool.domain.jobs import JobSpec, Role
from gpupool.domain.locality import dataset_key, env_key, image_key
from gpupool.scheduler.types import Placement, Want
from gpupool.services import cluster, identity, jobs
from gpupool.services.core import Principal
from gpupool.services.scheduling import SnapshotBuilder
from gpupool.services.scheduling._snapshots import placement_json
from gpupool.store.db import Database, prepare
from gpupool.store.models import (
    DatasetModel,
    DatasetVersionModel,
    ImageModel,
    JobModel,
    TeamModel,
)
from tests.support.environments import add_environment

NOW = 1_000_000.0
MANIFEST = "ab" * 32
ENV = "sha256:" + "cd" * 32
PREFIX = "sha256:" + "ef" * 32
IMAGE = "sha256:" + "12" * 32


@pytest.fixture
def db(database_url: str) -> Iterator[Database]:
    database = Database(database_url)
    prepare(database)
    with database.session() as session:
        identity.bootstrap(session, 0.0)
        quotas.create_team(session, "ml", quotas.Quota({}, None, 1.0), [], 0.0)
        ann = users.create_user(session, "ann", Role.MEMBER, ["ml"], 0.0)
        team = session.query(TeamModel).filter_by(name="ml").one()
        for name in ("node-a", "node-b"):
            inventory = NodeInventory(name=name, cpus=8, memory_bytes=64 * 1024**3)
            cluster.register(session, inventory, 0.0)
        dataset = DatasetModel(team_id=team.id, name="imagenet", created_at=0.0, created_by=ann.id)
        session.add(dataset)
        session.flush()
        session.add(
            DatasetVersionModel(
                dataset_id=dataset.id,
                number=3,
                manifest=MANIFEST,
                file_count=2,
                size_bytes=12 * 1024**3,
                blob_count=2,
                created_at=0.0,
                created_by=ann.id,
            )
        )
        add_environment(session, team.id, "torch", ENV, ann.id)
        add_environment(session, team.id, "site", PREFIX, ann.id, prefix="/opt/site")
        session.add(
            ImageModel(
                team_id=team.id,
                name="pytorch:2.4",
                digest=IMAGE,
                source="pull",
                size_bytes=3 * 1024**3,
                config={},
                created_at=0.0,
                created_by=ann.id,
            )
        )
    yield database
    database.dispose()


def submit(db: Database, **recorded: object) -> int:
    """A job of ann's, its spec then set as the submit records it (resolved refs)."""
    with db.reader() as session:
        user = users.get_user(session, "ann")
        who = Principal(user.id, user.name, Role.MEMBER, frozenset(t.id for t in user.teams))
    spec = JobSpec.model_validate({"command": ["true"], "resources": {"cpus": 1}})
    with db.session() as session:
        job_id = jobs.submit(session, who, spec, [], NOW).id
        data = session.get(JobModel, job_id).spec | recorded
        session.execute(update(JobModel).where(JobModel.id == job_id).values(spec=data))
    return job_id


def test_a_pending_job_wants_what_it_fetches_with_the_sizes_the_server_knows(
    db: Database,
) -> None:
    job_id = submit(
        db,
        environment=f"torch@{ENV}",
        datasets=[{"name": "imagenet", "version": 3, "manifest": MANIFEST, "mount": None}],
        image="pytorch:2.4",
        image_digest=IMAGE,
    )
    prefixed = submit(db, environment=f"site@{PREFIX}")
    with db.session() as session:  # a node that built the environment said how big it is
        cluster.record_holdings(session, {"node-b": {env_key(ENV): 700 * 1024**2}}, NOW)
    with db.reader() as session:
        snapshot = SnapshotBuilder().build(session, NOW)
    pending = {job.job_id: job for job in snapshot.pending}
    assert pending[job_id].wants == (
        Want(env_key(ENV), 700 * 1024**2),
        Want(dataset_key(MANIFEST), 12 * 1024**3),
        Want(image_key(IMAGE), 3 * 1024**3),
    )
    assert pending[prefixed].wants == ()  # a registered prefix is on every node already
    holds = {node.name: node.holds for node in snapshot.nodes}
    assert holds == {"node-a": frozenset(), "node-b": frozenset({env_key(ENV)})}


def test_a_node_holds_what_a_job_placed_there_fetches_until_it_says_so_itself(
    db: Database,
) -> None:
    job_id = submit(
        db, datasets=[{"name": "imagenet", "version": 3, "manifest": MANIFEST, "mount": None}]
    )
    builder = SnapshotBuilder()
    with db.reader() as session:
        builder.build(session, NOW)
    builder.placed([Placement(job_id, "node-a", (), 1.0, 0)])
    with db.reader() as session:
        nodes = {node.name: node.holds for node in builder.build(session, NOW).nodes}
    assert nodes == {"node-a": frozenset({dataset_key(MANIFEST)}), "node-b": frozenset()}
    with db.session() as session:  # its report now says it: the report is what counts
        cluster.record_holdings(session, {"node-a": {dataset_key(MANIFEST): 0}}, NOW + 5)
    with db.reader() as session:
        nodes = {node.name: node.holds for node in builder.build(session, NOW).nodes}
    assert nodes == {"node-a": frozenset({dataset_key(MANIFEST)}), "node-b": frozenset()}
    with db.session() as session:  # and when it drops it (evicted), placement knows
        cluster.record_holdings(session, {"node-a": {}}, NOW + 9)
    with db.reader() as session:
        nodes = {node.name: node.holds for node in builder.build(session, NOW).nodes}
    assert nodes == {"node-a": frozenset(), "node-b": frozenset()}


def test_a_placement_keeps_what_its_node_held() -> None:
    held = Placement(1, "node-b", (), 1.0, 0, held=(dataset_key(MANIFEST),))
    assert placement_json(held)["held"] == [dataset_key(MANIFEST)]
    assert "held" not in placement_json(Placement(1, "node-b", (), 1.0, 0))
