"""What a node tells uv of the site's package index: pip's own configuration read as pip
reads it, or the admin's settings; and what a runner is told of an environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpupool.executors import environments
from gpupool.executors.environments import package_index, platform_tag, runner_spec
from gpupool.settings import Settings


def settings(tmp_path: Path, **values: object) -> Settings:
    return Settings(data_dir=tmp_path / "data", **values)


def test_pips_configuration_becomes_uvs_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / "pip.conf"
    conf.write_text(
        "[global]\nindex-url = https://mirror.example/simple\n"
        "extra-index-url = file:///opt/more/simple https://two.example/simple\n"
        "find-links = /opt/wheels\ncert = /etc/ssl/ca.pem\n"
    )
    for name in (
        "PIP_INDEX_URL",
        "PIP_EXTRA_INDEX_URL",
        "PIP_FIND_LINKS",
        "PIP_NO_INDEX",
        "PIP_CERT",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "none"))
    monkeypatch.setattr(environments, "_pip_files", lambda home, environ: [str(conf)])
    index = package_index(settings(tmp_path))
    assert index.options == (
        "--index-url",
        "https://mirror.example/simple",
        "--extra-index-url",
        "file:///opt/more/simple",
        "--extra-index-url",
        "https://two.example/simple",
        "--find-links",
        "/opt/wheels",
    )
    assert set(index.local_paths) == {"/opt/more/simple", "/opt/wheels"}
    assert index.uv_env()["SSL_CERT_FILE"] == "/etc/ssl/ca.pem"
    assert index.uv_env()["UV_PYTHON_DOWNLOADS"] == "never"

    monkeypatch.setenv("PIP_NO_INDEX", "1")
    off = package_index(settings(tmp_path))
    assert off.options == ("--no-index", "--find-links", "/opt/wheels")


def test_the_admins_settings_replace_pips(tmp_path: Path) -> None:
    index = package_index(
        settings(
            tmp_path,
            env_index_url="https://packages.example/simple",
            env_extra_index_urls="https://a.example/simple, https://b.example/simple",
            env_find_links="/srv/wheels",
        )
    )
    assert index.options == (
        "--index-url",
        "https://packages.example/simple",
        "--extra-index-url",
        "https://a.example/simple",
        "--extra-index-url",
        "https://b.example/simple",
        "--find-links",
        "/srv/wheels",
    )


def test_a_runner_is_told_where_the_environment_lives_and_how_to_build_it(tmp_path: Path) -> None:
    site = settings(tmp_path, env_index_url="", env_no_index=True, env_find_links="/srv/wheels")
    env = {"id": "sha256:" + "ab" * 32, "name": "tools", "python": environments.server_python()}
    spec = runner_spec(site, env | {"lock": "alpha==1.0 --hash=sha256:00\n"})
    assert spec["dir"] == str(site.envs_dir / ("ab" * 32))
    assert spec["cache"] == str(site.envs_dir / ".uv-cache")
    assert spec["index"] == ["--no-index", "--find-links", "/srv/wheels", "--no-build"]
    assert "/srv/wheels" in spec["shown"] and Path(spec["python"]).exists()
    allowed = runner_spec(
        site.model_copy(update={"env_allow_source_builds": True}), env | {"lock": ""}
    )
    assert "--no-build" not in allowed["index"]
    prefix = runner_spec(site, {"id": "sha256:" + "cd" * 32, "name": "p", "prefix": "/opt/p"})
    assert prefix == {"id": "sha256:" + "cd" * 32, "name": "p", "dir": "/opt/p", "prefix": True}
    with pytest.raises(ValueError, match="no Python 3.1"):
        runner_spec(site, env | {"python": "3.1", "lock": ""})


def test_the_platform_is_the_machines() -> None:
    assert platform_tag().split("-", 1)[0] in ("x86_64", "aarch64")
