"""What changes between the running server's command and a new one (batch changes into one relaunch)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tunedeck.profiles.builder import Command


def split_flags(args: tuple[str, ...] | list[str]) -> tuple[list[str], dict[str, str | None]]:
    """Positional arguments and ``{flag: value}`` (None for a bare switch) of built args."""
    pos: list[str] = []
    flags: dict[str, str | None] = {}
    for tok in args:
        if tok.startswith("--"):
            name, eq, value = tok[2:].partition("=")
            flags[name] = value if eq else None
        else:
            pos.append(tok)
    return pos, flags


@dataclass(frozen=True, slots=True)
class CommandDiff:
    executable: tuple[tuple[str, ...], tuple[str, ...]] | None = None
    positional: tuple[tuple[str, ...], tuple[str, ...]] | None = None
    added: dict[str, str | None] = field(default_factory=dict)
    removed: dict[str, str | None] = field(default_factory=dict)
    changed: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    env_added: dict[str, str] = field(default_factory=dict)
    env_removed: dict[str, str] = field(default_factory=dict)
    env_changed: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (
            self.executable
            or self.positional
            or self.added
            or self.removed
            or self.changed
            or self.env_added
            or self.env_removed
            or self.env_changed
        )

    def lines(self) -> list[str]:
        """Human-readable, one change per line: ``+ --flag=v``, ``- --flag``, ``~ --flag: a → b``."""

        def f(name: str, v: str | None) -> str:
            return f"--{name}" if v is None else f"--{name}={v}"

        out: list[str] = []
        if self.executable:
            out.append(f"~ executable: {' '.join(self.executable[0])} → {' '.join(self.executable[1])}")
        if self.positional:
            out.append(f"~ arguments: {' '.join(self.positional[0])} → {' '.join(self.positional[1])}")
        out += [f"+ {f(k, v)}" for k, v in self.added.items()]
        out += [f"- {f(k, v)}" for k, v in self.removed.items()]
        out += [
            f"~ --{k}: {a if a is not None else '(switch)'} → {b if b is not None else '(switch)'}"
            for k, (a, b) in self.changed.items()
        ]
        out += [f"+ env {k}={v}" for k, v in self.env_added.items()]
        out += [f"- env {k}={v}" for k, v in self.env_removed.items()]
        out += [f"~ env {k}: {a} → {b}" for k, (a, b) in self.env_changed.items()]
        return out

    def jsonable(self) -> dict[str, Any]:
        return {
            "executable": [list(x) for x in self.executable] if self.executable else None,
            "positional": [list(x) for x in self.positional] if self.positional else None,
            "added": self.added,
            "removed": self.removed,
            "changed": {k: list(v) for k, v in self.changed.items()},
            "env_added": self.env_added,
            "env_removed": self.env_removed,
            "env_changed": {k: list(v) for k, v in self.env_changed.items()},
        }


def diff_commands(running: Command, new: Command) -> CommandDiff:
    old_pos, old_flags = split_flags(running.args)
    new_pos, new_flags = split_flags(new.args)
    oe, ne = running.env_dict, new.env_dict
    return CommandDiff(
        executable=(running.executable, new.executable) if running.executable != new.executable else None,
        positional=(tuple(old_pos), tuple(new_pos)) if old_pos != new_pos else None,
        added={k: v for k, v in new_flags.items() if k not in old_flags},
        removed={k: v for k, v in old_flags.items() if k not in new_flags},
        changed={k: (old_flags[k], v) for k, v in new_flags.items() if k in old_flags and old_flags[k] != v},
        env_added={k: v for k, v in ne.items() if k not in oe},
        env_removed={k: v for k, v in oe.items() if k not in ne},
        env_changed={k: (oe[k], v) for k, v in ne.items() if k in oe and oe[k] != v},
    )


def command_from_argv(engine: str, argv: list[str], env: dict[str, str], prefix_len: int | None = None) -> Command:
    """A Command for a server that is already running (argv and env as recorded at launch).

    Without ``prefix_len`` the executable part is everything before the first ``--flag``
    (for vLLM, before the model that precedes it).
    """
    from tunedeck.util.safety import env_command

    if prefix_len is None:
        first = next((i for i, a in enumerate(argv) if a.startswith("--")), len(argv))
        if engine == "vllm" and first > 0 and argv[first - 1] != "serve":
            first -= 1
        prefix_len = first
    return Command(
        engine=engine, argv=tuple(argv), env=tuple(env.items()), prefix_len=prefix_len, display=env_command(argv, env)
    )
