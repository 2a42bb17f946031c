"""Where a gang can go: candidate generation, scoring, and the choice of devices.

Rules, in order:
1. A job only uses one device class, from its acceptable types, with enough device memory.
2. Tightest domain first: a job that fits one NVLink island gets one if any node has such an
   island free; else one node; else the innermost topology level (leaf switch, then spine, ...)
   in which one domain has room; else the whole cluster. `Job.topology` caps how far it may
   spread; `Profile.split_small_jobs=False` forbids spreading a job that fits one node, and
   `Profile.locality_wait_s` delays it (delay scheduling).
3. Inside a multi-node domain, the gang takes the fewest children: whole-free children first
   (largest free first), then the best-fitting child for the remainder, recursively.
4. Several candidates (one per free-count bucket for single-node jobs, a few best-fitting
   domains for gangs) are rated by the profile's weighted scorers; ties go to the lowest index.
5. A job that asks for exactly N nodes (`Job.nodes` >= 2) takes `gpus / N` GPUs on each of N
   distinct nodes (`spread_candidates`): inside the innermost domain that has N such nodes,
   the nodes with the fewest free GPUs that suffice first (best fit), then the lowest index.

Only candidate *shapes* (node, GPU count) are computed here; device bits are chosen by
`pick_devices` when the chosen candidate is committed, keeping islands whole where possible.
"""

from __future__ import annotations

from typing import Final

from trainyard.core.framework import Profile, Scorer
from trainyard.core.resources import bits, lowest, lowest_n
from trainyard.core.state import ClusterState
from trainyard.core.types import Job

_SCAN_LIMIT: Final = 64  # nodes looked at per free-count bucket before giving up on CPU/memory


class Candidate:
    """A possible placement: class, (node, gpus) parts, and the level it spans.

    `level`: the innermost level containing all parts: `depth` for one node, -1 for the whole
    cluster. `domain`: the domain id at that level (node index when `level == depth`).

    A plain slotted class, not a dataclass: mypyc runs a dataclass's generated `__init__` as
    interpreted code, and a cycle makes one or more candidates per placement tried.
    """

    __slots__ = ("cls", "domain", "level", "parts")

    def __init__(self, cls: int, parts: list[tuple[int, int]], level: int, domain: int) -> None:
        self.cls = cls
        self.parts = parts
        self.level = level
        self.domain = domain


def job_demand(job: Job) -> tuple[float, float]:
    """CPU and memory per GPU (or per job for CPU-only jobs)."""
    g = job.gpus or 1
    return job.cpus / g, job.memory_gb / g


def _first_usable(
    state: ClusterState, mask: int, g: int, cpu: float, mem: float, island: int
) -> int:
    """Lowest node of `mask` with CPU/memory for `g` GPUs, or -1. `island`: 0 ignore NVLink
    islands, 1 prefer a node where the job fits one island (else the first usable node),
    2 require it."""
    free_cpu = state.free_cpu
    free_mem = state.free_mem
    need_cpu = cpu * g - 1e-9
    need_mem = mem * g - 1e-9
    first = -1
    for _ in range(_SCAN_LIMIT):
        if not mask:
            break
        n = (mask & -mask).bit_length() - 1  # masks span every node: each operation counts
        if free_cpu[n] >= need_cpu and free_mem[n] >= need_mem:
            if not island:
                return n
            free = state.free_mask[n]
            if any((free & isl).bit_count() >= g for isl in state.layout.islands[n]):
                return n
            if first < 0:
                first = n
        mask ^= 1 << n
    return first if island == 1 else -1


def single_node_candidates(
    state: ClusterState, job: Job, c: int, need_island: bool
) -> list[Candidate]:
    """The candidates of `single_nodes` (each `job.gpus` GPUs on one node)."""
    depth = state.layout.depth
    g = job.gpus
    return [Candidate(c, [(n, g)], depth, n) for n in single_nodes(state, job, c, need_island)]


def single_nodes(state: ClusterState, job: Job, c: int, need_island: bool) -> list[int]:
    """Up to three nodes: the first usable node of the two tightest free-count buckets
    >= job.gpus (best fit and next) and of the emptiest bucket (what a spreading scorer
    wants). More buckets would only cost time: the scorers are monotone in the free count
    except through the enclosing domain, which these three already contrast. Nodes are
    scanned in index order; one lacking CPU/memory is skipped, and where nodes have several
    NVLink islands one with a whole island free for the job is preferred (or required)."""
    g = job.gpus
    buckets = state.bucket[c]
    nb = len(buckets)
    cpu, mem = job_demand(job)
    island = 2 if need_island else 1 if state.layout.multi_island[c] else 0
    out: list[int] = []
    last = nb
    for k in range(g, nb):  # the two tightest buckets
        if buckets[k] and _add_first(state, out, c, k, g, cpu, mem, island) and len(out) == 2:
            last = k
            break
    for k in range(nb - 1, last, -1):  # and the emptiest one above them
        if buckets[k] and _add_first(state, out, c, k, g, cpu, mem, island):
            break
    return out


def _add_first(
    state: ClusterState,
    out: list[int],
    c: int,
    k: int,
    g: int,
    cpu: float,
    mem: float,
    island: int,
) -> bool:
    """Append the first usable node of class `c`'s free-count bucket `k`; False if none."""
    m = state.bucket[c][k]
    if not m:
        return False
    n = _first_usable(state, m, g, cpu, mem, island) if cpu > 0 or mem > 0 or island else lowest(m)
    if n < 0:
        return False
    out.append(n)
    return True


def _greedy(room: list[tuple[int, int]], need: int) -> list[tuple[int, int]]:
    """Fewest (free, id) entries covering `need`: largest first, the best fit for the rest.
    Returns (id, GPUs taken) pairs."""
    room = sorted(room, key=lambda rx: (-rx[0], rx[1]))
    out: list[tuple[int, int]] = []
    left = need
    for i, (r, x) in enumerate(room):
        rest = [(rr, xx) for rr, xx in room[i:] if rr >= left]
        if rest:
            _r, best = min(rest)
            out.append((best, left))
            return out
        out.append((x, r))
        left -= r
    return out


def _fill(
    state: ClusterState, c: int, need: int, level: int, kids: list[int], cpu: float, mem: float
) -> list[tuple[int, int]] | None:
    """Take `need` GPUs of class `c` from `kids` (domains of `level`, or nodes when level ==
    depth) using as few domains as possible at every level: one child if one fits (best
    fit), else the fewest children, and then, across all of those together, the fewest of
    their children, down to nodes. None if CPU/memory make it impossible."""
    layout = state.layout
    if level >= layout.depth:
        room = [(state.node_room(n, cpu, mem), n) for n in kids if layout.class_of_node[n] == c]
        room = [(r, n) for r, n in room if r > 0]
        if sum(r for r, _n in room) < need:
            return None
        return _greedy(room, need)
    free = state.dom_free[level][c]
    room = [(free[d], d) for d in kids if free[d] > 0]
    if sum(r for r, _d in room) < need:
        return None
    fits = [(r, d) for r, d in room if r >= need]
    if fits:
        _r, d = min(fits)
        sub = _fill(state, c, need, level + 1, layout.children[level][d], cpu, mem)
        if sub is not None:
            return sub
    chosen = _greedy(room, need)
    grandkids = [k for d, _take in chosen for k in layout.children[level][d]]
    found = _fill(state, c, need, level + 1, grandkids, cpu, mem)
    if found is None and len(chosen) < len(room):  # CPU/memory: widen to every domain
        everything = [k for _r, d in room for k in layout.children[level][d]]
        found = _fill(state, c, need, level + 1, everything, cpu, mem)
    return found


def gang_candidates(state: ClusterState, job: Job, c: int, max_level: int) -> list[Candidate]:
    """Candidates spanning several nodes, at the innermost level that has room."""
    layout = state.layout
    g = job.gpus
    cpu, mem = job_demand(job)
    for level in range(layout.depth - 1, max(max_level, 0) - 1, -1):
        free = state.dom_free[level][c]
        doms = sorted((f, d) for d, f in enumerate(free) if f >= g)
        out: list[Candidate] = []
        for _f, d in doms[:4]:
            parts = _fill(state, c, g, level + 1, layout.children[level][d], cpu, mem)
            if parts is not None:
                out.append(Candidate(c, parts, level, d))
        if out:
            return out
    if max_level < 0 and state.class_free[c] >= g:
        parts = _fill(state, c, g, 0, layout.top, cpu, mem)
        if parts is not None:
            return [Candidate(c, parts, -1, 0)]
    return []


def _pick_nodes(
    state: ClusterState, c: int, mask: int, count: int, per: int, cpu: float, mem: float
) -> list[tuple[int, int]] | None:
    """`count` nodes of `mask` with `per` usable GPUs each (the tightest free count first,
    then the lowest index), as (node, per) parts; None if fewer exist."""
    buckets = state.bucket[c]
    out: list[tuple[int, int]] = []
    for k in range(per, len(buckets)):
        m = buckets[k] & mask
        while m:
            low = m & -m
            m ^= low
            n = low.bit_length() - 1
            if (cpu > 0 or mem > 0) and state.node_room(n, cpu, mem) < per:
                continue
            out.append((n, per))
            if len(out) == count:
                return out
    return None


def spread_candidates(state: ClusterState, job: Job, c: int, max_level: int) -> list[Candidate]:
    """Candidates for a job of exactly `job.nodes` nodes (rule 5 of the module docstring):
    up to four domains of the innermost level that has room, fewest qualifying nodes first,
    or the whole cluster when the job may span it."""
    count = job.nodes
    per = job.gpus // count
    buckets = state.bucket[c]
    if per >= len(buckets):
        return []
    eligible = 0
    for k in range(per, len(buckets)):
        eligible |= buckets[k]
    if eligible.bit_count() < count:
        return []
    layout = state.layout
    cpu, mem = job_demand(job)
    for level in range(layout.depth - 1, max(max_level, 0) - 1, -1):
        doms = []
        for d, dm in enumerate(layout.domain_mask[level]):
            m = dm & eligible
            if m and m.bit_count() >= count:
                doms.append((m.bit_count(), d, m))
        doms.sort()
        out: list[Candidate] = []
        for _cnt, d, m in doms[:4]:
            parts = _pick_nodes(state, c, m, count, per, cpu, mem)
            if parts is not None:
                out.append(Candidate(c, parts, level, d))
        if out:
            return out
    if max_level < 0:
        parts = _pick_nodes(state, c, eligible, count, per, cpu, mem)
        if parts is not None:
            return [Candidate(c, parts, -1, 0)]
    return []


def candidates(
    state: ClusterState,
    job: Job,
    classes: tuple[int, ...],
    profile: Profile,
    max_level: int,
    may_split: bool = True,
) -> list[Candidate]:
    """All candidate placements for `job` over its acceptable classes (tightest span only).
    `may_split` is `profile.may_split(job, now)`: False keeps a job that fits one node on one."""
    layout = state.layout
    depth = layout.depth
    g = job.gpus
    out: list[Candidate] = []
    spans = False
    class_free = state.class_free
    for c in classes:
        if class_free[c] < g:
            continue
        if job.nodes > 1:
            found = spread_candidates(state, job, c, max_level)
            if found:
                out.extend(found)
                spans = True
            continue
        if g <= layout.class_node_max[c]:
            found = single_node_candidates(state, job, c, job.topology == "island")
            if found:
                out.extend(found)
                continue
            if max_level >= depth or not may_split:
                continue
        if max_level < depth:
            found = gang_candidates(state, job, c, max_level)
            if found:
                out.extend(found)
                spans = True
    if spans and len({cand.level for cand in out}) > 1:
        best = max(cand.level for cand in out)
        out = [cand for cand in out if cand.level == best]
    return out


def cpu_only_candidates(state: ClusterState, job: Job) -> list[Candidate]:
    """A CPU-only job goes on one node, preferring nodes without GPUs (then lowest index)."""
    layout = state.layout
    best: Candidate | None = None
    for n, node in enumerate(layout.nodes):
        if not node.schedulable or node.spare:
            continue
        if state.free_cpu[n] + 1e-9 < job.cpus or state.free_mem[n] + 1e-9 < job.memory_gb:
            continue
        cand = Candidate(layout.class_of_node[n], [(n, 0)], layout.depth, n)
        if layout.class_of_node[n] < 0:
            return [cand]
        if best is None:
            best = cand
    return [best] if best is not None else []


def choose(
    state: ClusterState,
    job: Job,
    cands: list[Candidate],
    scorers: list[tuple[Scorer[ClusterState, Candidate], float]],
) -> Candidate:
    """The candidate with the highest weighted score (the first on ties)."""
    if len(cands) == 1 or not scorers:
        return cands[0]
    totals = [0.0] * len(cands)
    for fn, weight in scorers:
        for i, value in enumerate(fn(state, job, cands)):
            totals[i] += weight * value
    best = 0
    for i in range(1, len(cands)):
        if totals[i] > totals[best] + 1e-12:
            best = i
    return cands[best]


def pick_devices(state: ClusterState, n: int, k: int) -> int:
    """Device mask of `k` free devices on node `n`: one island if it fits (best fit), else
    whole islands first, so that the largest free islands stay intact."""
    free = state.free_mask[n]
    islands = state.layout.islands[n]
    if len(islands) == 1:
        if k == 1:
            return free & -free
        return lowest_n(free, k)
    room = sorted(((free & isl).bit_count(), i) for i, isl in enumerate(islands))
    for cnt, i in room:
        if cnt >= k:
            return lowest_n(free & islands[i], k)
    out = 0
    left = k
    for cnt, i in sorted(room, key=lambda ci: (-ci[0], ci[1])):
        if not left:
            break
        take = min(cnt, left)
        out |= lowest_n(free & islands[i], take)
        left -= take
    return out


_DEVICES: Final[dict[int, tuple[int, ...]]] = {}


def devices_of(mask: int) -> tuple[int, ...]:
    """Device indices of a mask (memoised: nodes have few distinct masks)."""
    found = _DEVICES.get(mask)
    if found is None:
        found = tuple(bits(mask))
        if mask < 1 << 16:
            _DEVICES[mask] = found
    return found
