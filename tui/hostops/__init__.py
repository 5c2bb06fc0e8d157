"""Operating a host, from here or on the host itself: connect to it (local or SSH, with
host keys checked), run commands and scripts, launch servers detached, find, stop and
follow them, and track their startup. Below the laptop-only services and the host-side
runtime, which both use it."""
