"""Progress bars and CUDA-graph capture lines of one server start (:class:`Bars`): the weight
shards' bar, both engines' graph-capture bars and their begin/end lines. The parser
(:mod:`tunedeck.logparse.parser`) hands it the lines that look like one."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tunedeck.logparse.patterns import (
    SG_GRAPH_BEGIN,
    SG_GRAPH_END,
    SG_GRAPH_PROG,
    SHARDS,
    TQDM,
    VL_GRAPH_BEGIN,
    VL_GRAPH_DONE,
    VL_GRAPH_PROG,
)

if TYPE_CHECKING:
    from tunedeck.logparse.parser import LogParser


class Bars:
    """The bars of one start (a new start in the same log gets a new one)."""

    def __init__(self, p: LogParser) -> None:
        self.p = p
        #: the last bar position reported (phase, label, n, total): a repeated frame is not news
        self._last: tuple[str, str, int, int] | None = None
        #: between SGLang's "Capture … graph begin" and its end: a bare bar there is the capture's
        self._sg_capture_open = False

    def bar(self, msg: str) -> None:
        """A progress-bar line (``%|`` or ``% Completed |``): weights, or a graph capture."""
        st = self.p.state
        m = SHARDS.search(msg)
        if m:
            n, total = int(m.group(3)), int(m.group(4))
            prev = st.weights
            st.weights = (n, total)
            if n == total and prev != (n, total):
                st.weight_bars.append((n, total))
            self._progress("weight-loading", "weights", n, total)
            return
        m = VL_GRAPH_PROG.search(msg)
        if m:
            self._graph_progress(m.group(1) or "", int(m.group(3)), int(m.group(4)))
            return
        m = SG_GRAPH_PROG.search(msg)
        if m:
            label = (
                st.graph_label
                if st.graph_label not in (None, "")
                else ("decode" if m.group(1) == "batches" else "prefill")
            )
            self._graph_progress(label, int(m.group(5)), int(m.group(6)))
            return
        if not self._sg_capture_open or st.engine == "vllm":
            return  # a bare bar outside SGLang's capture begin/end is someone else's
        m = TQDM.search(msg)
        if m and st.phase == "graph-capture":
            head = msg[: m.start()].strip()
            if not head:
                # a bare bar between "Capture … graph begin" and its end (the first frame, or old SGLang)
                self._graph_progress(st.graph_label or "", int(m.group(2)), int(m.group(3)))

    def _progress(self, p: str, label: str, n: int, total: int) -> None:
        key = (p, label, n, total)
        if key == self._last:
            return  # the 100% frame appears twice; the last one wins silently
        self._last = key
        self.p.phase(p, n / total if total else None, n=n, total=total, label=label)

    def _graph_progress(self, label: str, n: int, total: int) -> None:
        st = self.p.state
        st.graph_seen = True
        if label != st.graph_label or (st.graph is not None and (total != st.graph[1] or n < st.graph[0])):
            st.graph_done = False
        st.graph_label = label
        st.graph = (n, total)
        if n == total:
            bar = (label, n, total)
            if not st.graph_bars or st.graph_bars[-1] != bar:
                st.graph_bars.append(bar)
        else:
            st.graph_done = False
        self._progress("graph-capture", label, n, total)

    def graph_lines(self, msg: str) -> None:
        """A CUDA-graph capture line of either engine (begin, end, "Graph capturing finished")."""
        st = self.p.state
        phase, fact = self.p.phase, self.p.fact
        m = SG_GRAPH_BEGIN.search(msg)
        if m:
            label = m.group(1) or ""
            self._sg_capture_open = True
            if st.phase != "graph-capture" or st.graph_label != label or st.graph_done:
                st.graph_label = label
                st.graph = None
                st.graph_done = False
                st.graph_seen = True
                phase("graph-capture", 0.0, label=label)
            return
        m = SG_GRAPH_END.search(msg)
        if m:
            st.graph_seen = True
            self._sg_capture_open = False
            if not st.graph_done or st.phase != "graph-capture":
                st.graph_done = True
                label = m.group(1) or st.graph_label or ""
                phase("graph-capture", 1.0, label=label, done=True)
                if m.group(2):
                    fact("graph_seconds", float(m.group(2)))
            return
        if st.engine != "sglang" and VL_GRAPH_BEGIN.search(msg):
            if st.phase != "graph-capture":
                st.graph_seen = True
                phase("graph-capture", 0.0)
            return
        m = VL_GRAPH_DONE.search(msg)
        if m:
            st.graph_seen = True
            if not st.graph_done:
                st.graph_done = True
                phase("graph-capture", 1.0, label=st.graph_label or "", done=True)
                fact("graph_seconds", float(m.group(1)))
                if m.group(2):
                    fact("graph_mem_gb", float(m.group(2)))
