"""Collectors: async producers of immutable snapshots (no Textual imports).

- :class:`tui.collectors.gpu.GpuCollector` ``(host, interval).stream()`` -> GpuStatus per block;
  ``sample_once()`` for one-shot use.
- :class:`tui.collectors.hoststats.HostCollector` ``(host).sample()`` -> HostStats.
- :class:`tui.collectors.servers.ServerCollector` ``(host, specs).sample()`` -> tuple[ServerStats, ...].
- :func:`tui.collectors.status.collect_status` ``(host, servers)`` -> StatusSnapshot.
- :class:`tui.collectors.history.GpuHistory`: bounded per-GPU util/memory history.
- :mod:`tui.collectors.smi` and :mod:`tui.collectors.prom`: pure parsers.
"""
