"""The averaging schedules replayed (experiments/gpu_model/schedule_replay.py), on cases worked by hand: DDP's buckets (one,
many, the first capped at 1 MiB, a gradient larger than the cap) and Horovod's cycles (a fusion that a cycle
splits, a gradient larger than the threshold). A link of 1 GB/s over 2 ranks and no latency: an allreduce of b
bytes takes b / 1e9 s (2(p-1)/p = 1)."""

import pytest

from experiments.gpu_model.schedule_replay import MIB, Gradient, Link, ddp, ddp_buckets, horovod, horovod_over_phases

LINK = Link(latency_s=0.0, bytes_per_s=1e9, ranks=2)
MS = 1e-3


def backward(*ready_ms_and_mib: tuple[float, float]) -> list[Gradient]:
    """Gradients in backward's order (the last parameter first), each (ready at ms, MiB)."""
    n = len(ready_ms_and_mib)
    return [Gradient(ms * MS, int(mib * MIB), n - 1 - i) for i, (ms, mib) in enumerate(ready_ms_and_mib)]


def test_one_bucket_waits_for_its_last_gradient_and_is_all_exposed():
    grads = backward((10, 0.25), (20, 0.25), (30, 0.25))  # 0.75 MiB: under the first bucket's 1 MiB
    found = ddp(grads, backward_end_s=30 * MS, link=LINK)
    assert [a.indices for a in found.allreduces] == [(2, 1, 0)]
    (only,) = found.allreduces
    assert only.start_s == pytest.approx(30 * MS) and only.end_s == pytest.approx(30 * MS + 0.75 * MIB / 1e9)
    assert found.wait_s == pytest.approx(0.75 * MIB / 1e9)


def test_the_first_bucket_closes_at_1_mib_and_the_rest_at_the_cap():
    grads = backward((1, 0.5), (2, 0.75), (3, 10), (4, 20), (5, 1))
    # first: 0.5 + 0.75 >= 1 MiB closes it; then 10 + 20 >= 25 MiB; the last 1 MiB alone
    assert [[g.index for g in b] for b in ddp_buckets(grads)] == [[4, 3], [2, 1], [0]]


def test_a_gradient_larger_than_the_cap_fills_a_bucket_of_its_own():
    grads = backward((1, 2), (2, 30), (3, 1))
    assert [[g.index for g in b] for b in ddp_buckets(grads)] == [[2], [1], [0]]


def test_many_buckets_overlap_backward_and_run_one_after_another():
    # 4 buckets of 4 MiB (4.19 ms each) ready every 2 ms: the link is the bottleneck, so they queue
    grads = backward((0, 4), (2, 4), (4, 4), (6, 4))
    found = ddp(grads, backward_end_s=6 * MS, link=LINK, first_cap_bytes=MIB, cap_bytes=MIB)
    took = 4 * MIB / 1e9
    assert [a.start_s for a in found.allreduces] == pytest.approx([0, took, 2 * took, 3 * took])
    assert found.wait_s == pytest.approx(4 * took - 6 * MS)
    two = ddp(grads, backward_end_s=6 * MS, link=LINK, first_cap_bytes=MIB, cap_bytes=MIB, in_flight=2)
    assert [a.start_s for a in two.allreduces] == pytest.approx([0, 2 * MS, took, took + 2 * MS])


def test_a_bucket_launches_no_sooner_than_the_one_before_it():
    grads = [Gradient(5 * MS, 2 * MIB, 1), Gradient(1 * MS, 2 * MIB, 0)]  # the later parameter is ready last
    found = ddp(grads, backward_end_s=5 * MS, link=LINK)
    assert [a.indices for a in found.allreduces] == [(0,), (1,)] and found.allreduces[1].start_s >= 5 * MS


def test_horovod_fuses_what_one_cycle_finds_ready_and_a_cycle_splits_a_fusion():
    # ready at 0.2, 0.4 and 1.3 ms; cycles wake at 0, 1, 2 ms: the first two fuse at 1 ms (0.52 ms, done before the
    # next cycle), the third goes at 2 ms
    grads = backward((0.2, 0.25), (0.4, 0.25), (1.3, 0.25))
    found = horovod(grads, backward_end_s=1.3 * MS, link=LINK)
    assert [a.indices for a in found.allreduces] == [(2, 1), (0,)] and found.cycles == 2
    assert [a.start_s for a in found.allreduces] == pytest.approx([1 * MS, 2 * MS])
    assert found.wait_s == pytest.approx(2 * MS + 0.25 * MIB / 1e9 - 1.3 * MS)
    slow = horovod(grads, backward_end_s=1.3 * MS, link=LINK, cycle_s=5 * MS)  # one cycle at 5 ms takes all three
    assert [a.indices for a in slow.allreduces] == [(2, 1, 0)]


def test_a_cycle_whose_work_outlasts_it_wakes_the_next_at_once():
    grads = backward((0.1, 4), (0.2, 4))  # the first's 4.19 ms allreduce runs past the cycles at 1-4 ms
    found = horovod(grads, backward_end_s=0.2 * MS, link=LINK, fusion_bytes=4 * MIB, phase_s=0.15 * MS)
    assert [a.indices for a in found.allreduces] == [(1,), (0,)]
    assert found.allreduces[1].start_s == pytest.approx(found.allreduces[0].end_s)


def test_a_gradient_larger_than_the_fusion_threshold_goes_alone_and_a_buffer_pays_its_copies():
    copying = Link(latency_s=0.0, bytes_per_s=1e9, ranks=2, copy_bytes_per_s=1e10)
    grads = backward((0, 1), (0, 3), (0, 1))
    found = horovod(grads, backward_end_s=0.0, link=copying, fusion_bytes=2 * MIB)
    assert [a.indices for a in found.allreduces] == [(2,), (1,), (0,)]  # 1 + 3 > 2 MiB: each alone, no copy
    fused = horovod(grads, backward_end_s=0.0, link=copying, fusion_bytes=8 * MIB)
    (one,) = fused.allreduces
    assert one.end_s - one.start_s == pytest.approx(5 * MIB / 1e9 + 2 * 5 * MIB / 1e10)


def test_a_ring_of_p_ranks_sends_2_p_minus_1_over_p_of_the_bytes_and_2_p_minus_1_messages():
    ring = Link(latency_s=1e-5, bytes_per_s=1e9, ranks=8)
    assert ring.allreduce_s(8 * MIB) == pytest.approx(14 * 1e-5 + 1.75 * 8 * MIB / 1e9)
    assert Link(1e-5, 1e9, 1).allreduce_s(MIB) == 0.0


def test_horovod_s_phase_is_spread_over_a_cycle_and_the_median_taken():
    grads = backward((0.5, 0.1))
    found = horovod_over_phases(grads, backward_end_s=0.5 * MS, link=LINK, phases=4)
    # first cycles at 0, .25, .5, .75 ms find it (ready at .5) at 1, 1.25, .5 and .75 ms: waits .5, .75, 0, .25 + the op
    op = int(0.1 * MIB) / 1e9
    assert found.wait_s == pytest.approx(0.5 * MS + op)  # the median of the four


def test_a_compression_hook_halves_what_a_bucket_sends_not_how_the_buckets_are_cut():
    grads = backward((1, 0.75), (2, 0.5), (3, 2))  # by their own bytes the first bucket closes at 1.25 MiB
    found = ddp(grads, backward_end_s=3 * MS, link=LINK, wire=0.5)
    assert [a.indices for a in found.allreduces] == [(2, 1), (0,)]  # by the wire's, 0.625 MiB would take all three
    assert [a.bytes for a in found.allreduces] == [int(1.25 * MIB * 0.5), MIB]
