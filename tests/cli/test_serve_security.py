"""`jsraft serve`'s security flags (nats-server's `--user`, `--pass`, `--auth`, `--tls*`, and jsraft's
secret files) become the right `NodeConfig` fields, and a bad combination or an unloadable certificate
is a configuration error (exit 2) that touches nothing on disk.

Method: the real argument parser (`jsraft.cli`) for the mapping; a real `python -m jsraft serve`
subprocess for the exit status, its one-line message and the untouched store directory.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from jsraft.cli import build_parser
from jsraft.cli.serve import config_from_args


def config_of(tmp_path, *flags: str):
    args = build_parser().parse_args(["serve", "--name", "n1", "--store-dir", str(tmp_path / "d"), *flags])
    return config_from_args(args)


def test_flags_map_to_node_config(tmp_path):
    (tmp_path / "secret").write_text("a-cluster-secret\n")
    config = config_of(tmp_path, "--user", "foo", "--pass", "bar", "--tls", "--tlscert", "c.pem", "--tlskey",
                       "k.pem", "--tlsverify", "--tlscacert", "ca.pem", "--cluster-secret-file",
                       str(tmp_path / "secret"))
    assert [(u.user, u.password) for u in config.client_auth.users] == [("foo", "bar")]
    tls = config.client_tls
    assert (tls.cert_file, tls.key_file, tls.ca_file, tls.verify) == ("c.pem", "k.pem", "ca.pem", True)
    assert config.cluster_secret == "a-cluster-secret"
    assert config_of(tmp_path, "--auth", "tok").client_auth.token == "tok"


@pytest.mark.parametrize("flags, message", [
    (["--user", "foo"], "--user and --pass go together"),
    (["--user", "foo", "--pass", "bar", "--auth", "t"], "not with --auth"),
    (["--tls", "--tlscert", "c.pem"], "--tls needs --tlscert and --tlskey"),
    (["--tls", "--tlscert", "/nonexistent/c.pem", "--tlskey", "/nonexistent/k.pem"], "cannot load the TLS files"),
    (["--cluster-secret-file", "/nonexistent/secret"], "cannot read"),
])
def test_bad_security_flags_exit_2_and_touch_nothing(tmp_path, flags, message):
    data = tmp_path / "data"
    result = subprocess.run([sys.executable, "-m", "jsraft", "serve", "--name", "a", "--store-dir", str(data),
                             "-p", "0", "--cluster-port", "0", *flags], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "configuration error" in result.stderr
    assert not data.exists()


def test_a_bad_operator_jwt_exits_2_and_touches_nothing(tmp_path):
    bad_operator = "eyJub3QtYS1oZWFkZXI.e30.c2ln"  # looks inline (eyJ), but its header is no JWT header
    (tmp_path / "n.conf").write_text(f"operator: {bad_operator}\nresolver: MEMORY\n")
    data = tmp_path / "data"
    result = subprocess.run([sys.executable, "-m", "jsraft", "serve", "-c", str(tmp_path / "n.conf"), "--name", "a",
                             "--store-dir", str(data), "-p", "0", "--cluster-port", "0"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "configuration error" in result.stderr and "operator[0]: JWT header" in result.stderr
    assert bad_operator not in result.stderr and not data.exists()
