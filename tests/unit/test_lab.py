"""The device lab, pure: the lab file's loader (file:line:key errors), the ssh and adb
command plans, what a probed device means for a platform (eliza.core.host.on_device) and
for verify's plan: run there, keep fresh evidence when it is unreachable, else NOT
RUNNABLE HERE with the transport's words."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from eliza.core.host import decide
from eliza.core.lab import (
    STATUS_MARKER,
    Device,
    DeviceState,
    Transport,
    adb_argv,
    parse_identity,
    receive_script,
    remote_command,
    split_status,
    ssh_argv,
    stage_script,
)
from eliza.core.matrix import Matrix, Requirement
from eliza.core.report.states import GridState
from eliza.core.verify_plan import Keep, PlanFacts, Run, Skip, plan
from eliza.formats.lab_yaml import LabError, load_lab, parse_lab
from tests.unit.test_verify_plan import HOST, SELECT_ALL, evidence_for, facts, only_step

LAB = """\
version: 1
devices:
  - name: pi
    platform: linux-arm64
    transport:
      ssh:
        destination: ci@pi.lab
        options: [Port=2222]
    provides: [arm64-cpu]
  - name: phone
    platform: android-arm64
    transport: {adb: {serial: R58M12345}}
    provides: [android-device]
    work_dir: /data/local/tmp/e
"""

SSH = Device(name="pi", platform="linux-arm64", transport=Transport.SSH, address="ci@pi.lab",
             ssh_options=("Port=2222",), provides=(Requirement.ARM64_CPU,))  # fmt: skip
ADB = Device(name="phone", platform="android-arm64", transport=Transport.ADB, address="R58M12345")


def test_a_lab_file_gives_its_devices(matrix: Matrix) -> None:
    lab = parse_lab(LAB, "lab.yaml", matrix)
    assert [d.name for d in lab.devices] == ["pi", "phone"]
    assert lab.devices[0] == replace(SSH, line=3)
    assert lab.devices[1].transport is Transport.ADB and lab.devices[1].address == "R58M12345"
    assert lab.devices[1].store == "/data/local/tmp/e/store"
    assert lab.for_platform("linux-arm64") == lab.devices[0] and lab.for_platform("linux-cpu") is None


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (("platform: linux-arm64", "platform: linux-arm46"),
         "lab.yaml:4: devices[0].platform: unknown platform 'linux-arm46'; did you mean 'linux-arm64'?"),
        (("    provides: [arm64-cpu]", "    provide: [arm64-cpu]"),
         "lab.yaml:9: devices[0].provide: unknown key 'provide'; did you mean 'provides'?"),
        (("        destination: ci@pi.lab\n", ""),
         "lab.yaml:6: devices[0].transport.ssh: missing required key 'destination'"),
        (("[android-device]", "[android-phone]"),
         "lab.yaml:13: devices[1].provides[0]: unknown run requirement 'android-phone'"),
        (("name: phone", "name: pi"),
         "lab.yaml:10: devices[1].name: device 'pi' is declared twice (first at line 3)"),
    ],
)  # fmt: skip
def test_a_mistake_in_a_lab_file_is_one_line_naming_file_line_and_key(
    matrix: Matrix, edit: tuple[str, str], expected: str
) -> None:
    with pytest.raises(LabError) as caught:
        parse_lab(LAB.replace(*edit, 1), "lab.yaml", matrix)
    assert len(caught.value.problems) == 1
    assert str(caught.value).startswith(expected)


def test_an_unreadable_lab_file_says_so(matrix: Matrix, tmp_path: Path) -> None:
    with pytest.raises(LabError, match=r"nowhere\.yaml: cannot read the lab file"):
        load_lab(tmp_path / "nowhere.yaml", matrix)


# --- command plans ---------------------------------------------------------------------


def test_ssh_never_prompts_and_the_lab_cannot_turn_that_off() -> None:
    argv = ssh_argv(replace(SSH, ssh_options=("BatchMode=no", "Port=2222")), "uname -a", connect_timeout=7)
    options = [argv[i + 1] for i, word in enumerate(argv) if word == "-o"]
    # ssh keeps the first value of a setting: ours comes before the lab's.
    assert options.index("BatchMode=yes") < options.index("BatchMode=no")
    assert {"ConnectTimeout=7", "StrictHostKeyChecking=accept-new", "Port=2222"} <= set(options)
    assert argv[-3:] == ["ci@pi.lab", "--", "uname -a"]


def test_adb_plans_address_the_serial() -> None:
    assert adb_argv(ADB, "push", "a", "/data/x") == ["adb", "-s", "R58M12345", "push", "a", "/data/x"]
    assert adb_argv(ADB, "shell", "uname -a")[:4] == ["adb", "-s", "R58M12345", "shell"]
    assert ADB.work == "/data/local/tmp/eliza-device"


def test_android_identity_has_model_and_fingerprint() -> None:
    facts = parse_identity(Transport.ADB, "Linux localhost 5.10\nPixel 8\ngoogle/shiba/shiba:14/AP1A\n")
    assert facts == {
        "uname": "Linux localhost 5.10",
        "model": "Pixel 8",
        "fingerprint": "google/shiba/shiba:14/AP1A",
    }


def sh(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-c", script], cwd=cwd, capture_output=True, text=True, check=False)


def test_the_remote_line_runs_in_the_run_dir_under_the_prefix_and_reports_its_status(tmp_path: Path) -> None:
    device = replace(SSH, command_prefix=("env", "PREFIXED=1"))
    line = remote_command(device, str(tmp_path), ["sh", "-c", "echo $PREFIXED $X $PWD; exit 3"],
                          timeout_s=5, env={"X": "a b"})  # fmt: skip
    done = sh(line, Path("/"))
    assert done.stdout.strip() == f"1 a b {tmp_path}"
    status, rest = split_status(done.stderr)
    assert status == 3 and STATUS_MARKER not in rest
    assert split_status("Connection closed by remote host\n") == (None, "Connection closed by remote host\n")


def test_a_hang_is_cut_by_the_device_side_time_limit(tmp_path: Path) -> None:
    done = sh(remote_command(SSH, str(tmp_path), ["sleep", "30"], timeout_s=1), Path("/"))
    assert split_status(done.stderr)[0] == 124  # timeout(1)'s status for a program it stopped


def test_stage_and_receive_scripts_lay_out_the_store_and_the_run_dir(tmp_path: Path) -> None:
    store, run_dir = tmp_path / "the store", tmp_path / "runs" / "k"  # paths are quoted for the shell
    payload = tmp_path / "payload"
    payload.mkdir()
    (payload / ("a" * 64)).write_text("A")
    tar = tmp_path / "p.tar"
    subprocess.run(["tar", "-cf", str(tar), "-C", str(payload), "a" * 64], check=True)
    script = receive_script(str(store), str(store / ".in"))
    with tar.open("rb") as archive:
        received = subprocess.run(["sh", "-c", script], stdin=archive, capture_output=True, check=False)
    assert received.returncode == 0 and sorted(p.name for p in store.iterdir()) == ["a" * 64]
    assert sh(stage_script(str(store), str(run_dir), [("a" * 64, "in/x/lib.so")]), tmp_path).returncode == 0
    assert (run_dir / "in" / "x" / "lib.so").read_text() == "A" and (run_dir / "out").is_dir()
    (run_dir / "stale").write_text("left by a broken run")
    assert sh(stage_script(str(store), str(run_dir), []), tmp_path).returncode == 0
    assert not (run_dir / "stale").exists()  # a run replaces its run directory


# --- what a device means for a platform and for verify ----------------------------------


def reachable(device: Device) -> DeviceState:
    return DeviceState(device=device, reachable=True, identity={"uname": "Linux pi 6.1 aarch64"})


def down(device: Device) -> DeviceState:
    return DeviceState(
        device=device, reachable=False, error="ssh: connect to host pi.lab port 2222: No route to host"
    )


def test_a_reachable_device_meets_the_run_requires_it_provides(matrix: Matrix) -> None:
    arm = matrix.platform("linux-arm64")
    can = decide(HOST, arm, reachable(SSH))
    assert can.can_run and can.device == "device pi via ssh ci@pi.lab" and not can.emulated and can.as_target
    assert can.how_it_runs(device_free=False) == can.device and "Linux pi 6.1" in can.run_reason
    lacking = decide(HOST, arm, reachable(replace(SSH, provides=())))
    assert not lacking.can_run and "does not provide arm64-cpu" in lacking.run_reason
    android = decide(HOST, matrix.platform("android-arm64"), reachable(ADB))
    assert not android.can_run  # provides nothing: a device that meets nothing runs nothing


def test_an_unreachable_device_says_why_and_runs_nothing_here(matrix: Matrix) -> None:
    can = decide(HOST, matrix.platform("linux-arm64"), down(SSH))
    assert not can.can_run and not can.can_run_fallback and not can.emulated  # not the emulator either
    assert "device pi via ssh ci@pi.lab, which is unreachable: ssh: connect to host" in can.run_reason


def with_device(matrix: Matrix, state: DeviceState, **kw: object) -> PlanFacts:
    base = facts(matrix, **kw)
    caps = dict(base.capabilities)
    caps["linux-arm64"] = decide(HOST, matrix.platform("linux-arm64"), state)
    return replace(base, capabilities=caps)


def test_verify_runs_the_platform_s_run_time_checks_on_the_device(matrix: Matrix) -> None:
    p = plan(matrix, with_device(matrix, reachable(SSH)), SELECT_ALL)
    for check in ("selector", "gate-fallthrough", "byte-identity-reference"):
        run = only_step(p, "linux-arm64.none", check)
        assert isinstance(run, Run) and run.how == "device pi via ssh ci@pi.lab"
    build = only_step(p, "linux-arm64.none", "build")
    assert isinstance(build, Run) and build.how == "native"  # built here, run there
    assert any(n.startswith("linux-arm64: checks run as target binaries on device pi") for n in p.notes)


def test_an_unreachable_device_keeps_fresh_evidence_and_skips_the_rest(matrix: Matrix) -> None:
    p = plan(matrix, with_device(matrix, down(SSH)), SELECT_ALL)
    skip = only_step(p, "linux-arm64.none", "selector")
    assert isinstance(skip, Skip) and skip.state is GridState.NOT_RUNNABLE_HERE
    assert "No route to host" in skip.reason and not skip.records
    assert isinstance(only_step(p, "linux-arm64.none", "build"), Run)  # building needs no device
    fresh = evidence_for(matrix, ["linux-arm64.none"])
    kept = plan(matrix, with_device(matrix, down(SSH), evidence=fresh), SELECT_ALL)
    assert isinstance(only_step(kept, "linux-arm64.none", "selector"), Keep)
