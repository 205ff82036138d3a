"""An experiment of your own, in one module: does spraying speed up an all-to-all?"""

import statistics

import topologies
from fabric.experiment import Experiment, Measured, Mode, Scheduled
from fabric.traffic import collectives, sizing
from fabric.traffic.placement import rank_hosts
from fabric.traffic.result import records, span_s

POLICIES = {"ecmp": "flow", "spray": "packet"}  # routing policy -> the senders' entropy


def seconds(run, result, report):
    """A runs.csv row: the all-to-all's time, first send to last byte (None: unfinished)."""
    return {"seconds": span_s(records(result.transfer_rows())), "valid": report["valid"]}


class AllToAll(Experiment):
    name = "all-to-all"
    question = "How much faster is an all-to-all when the switches spray its packets?"
    default_topology = "leaf-spine,leaves=2,spines=2,hosts_per_leaf=2"
    modes = {"quick": Mode(seeds=1), "full": Mode(seeds=5)}

    def run_count(self, ctx):
        return len(POLICIES) * len(self.seeds(ctx))

    def estimate_s(self, ctx):
        return 20.0 * self.run_count(ctx)

    def measure(self, ctx, runner):
        graph = topologies.build(self.topologies(ctx)[0])
        for policy, entropy in POLICIES.items():
            transport = ctx.roce(entropy=entropy)
            with runner.bring_up(graph, policy=policy, host_mbps=ctx.host_mbps,
                                 packet_bytes=transport.packet_bytes) as emu:
                size = sizing.bytes_of(300, transport)  # a buffer of 300 packets, at any rate
                runs = [Scheduled({"policy": policy, "seed": seed},
                                  collectives.generate("all-to-all", rank_hosts(graph), size),
                                  seed) for seed in self.seeds(ctx)]
                runner.run(emu, runs, transport, policy, seconds)
        return Measured({"topology": self.topologies(ctx)[0]})

    def table(self, rows):
        return [{"policy": p, "seconds": statistics.fmean(r["seconds"] for r in rows
                                                         if r["policy"] == p)}
                for p in POLICIES if all(r["seconds"] for r in rows if r["policy"] == p)]

    def figures(self):
        return {"seconds": seconds_figure}


def seconds_figure(data):
    """The all-to-all's time per policy, one dot per seed."""
    fig, ax = data.plt.subplots(figsize=(3, 2.4))
    for i, policy in enumerate(POLICIES):
        times = [float(r["seconds"]) for r in data.runs if r["policy"] == policy and r["seconds"]]
        ax.scatter([i] * len(times), times)
    ax.set_xticks(range(len(POLICIES)), list(POLICIES))
    ax.set_ylabel("all-to-all time (s)")
    return fig


EXPERIMENT = AllToAll()
