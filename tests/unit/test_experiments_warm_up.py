"""Each bring-up's first measured run comes after an unmeasured warm-up (pure code)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from fabric.experiment import RunContext
from fabric.experiment.emulated import WARM_UP_PACKETS, EmulatorBackend
from fabric.experiment.runs import Progress, RunLog, Scheduled
from fabric.traffic.model import Transfer, TransportSpec
from tests.fake_emulation import idle_ok


def test_the_first_run_is_preceded_by_a_few_packets_of_its_transfers(tmp_path: Path):
    calls = []

    def fake_traffic(emu, transfers, transport, workdir, seed, deadline_s=120.0, during=None):
        calls.append((Path(workdir).name, [t.bytes for t in transfers], seed))
        return SimpleNamespace(transfer_rows=lambda: [], errors=[], fidelity=[],
                               flow_control=[])

    transport = TransportSpec("roce", mtu_payload=1000)
    runs = [Scheduled({"seed": seed}, [Transfer("a", "h0", "h1", 10**6),
                                         Transfer("b", "h1", "h0", 500)], seed)
            for seed in (7, 8)]
    log = RunLog()
    EmulatorBackend(traffic=fake_traffic, idle=idle_ok).run(
        RunContext(tmp_path), SimpleNamespace(controller=SimpleNamespace(save_log=lambda path: None)), runs,
        transport, tmp_path, Progress(2, "test"), lambda run, result, report: {}, log)
    assert calls == [("warm-up", [WARM_UP_PACKETS * 1000, 500], 7),
                     ("7", [10**6, 500], 7), ("8", [10**6, 500], 8)]
    assert [row["seed"] for row in log.rows] == [7, 8]  # the warm-up is not a result
