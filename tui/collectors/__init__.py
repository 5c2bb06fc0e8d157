"""Collectors: async producers of immutable snapshots (no Textual imports).

- :class:`tunedeck.collectors.gpu.GpuCollector` ``(host, interval).stream()`` -> GpuStatus per block;
  ``sample_once()`` for one-shot use.
- :class:`tunedeck.collectors.hoststats.HostCollector` ``(host).sample()`` -> HostStats.
- :class:`tunedeck.collectors.servers.ServerCollector` ``(host, specs).sample()`` -> tuple[ServerStats, ...].
- :func:`tunedeck.collectors.status.collect_status` ``(host, servers)`` -> StatusSnapshot.
- :class:`tunedeck.collectors.history.GpuHistory`: bounded per-GPU util/memory history.
- :mod:`tunedeck.collectors.smi` and :mod:`tunedeck.collectors.prom`: pure parsers.
"""
