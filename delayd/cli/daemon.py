"""The daemon verbs of `delayd`: start, stop, restart, reload, status (this host's master,
or with --cluster every live daemon on the store)."""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from delayd.cli.common import (
    Verb,
    client_for,
    config_loader,
    emit,
    fail,
    load_config,
    non_negative,
    verb_parser,
    with_options,
)

STARTING_EXIT = 4  # `status` of a master that is starting: neither running (0) nor not running (3)
DEGRADED_EXIT = 1  # `status` of a master with a child down or crash-looping: running, but not all is well


def cmd_start(args: argparse.Namespace) -> int:
    from delayd.daemon import launch
    return launch.start(load_config(args), config_loader(args), args.foreground)


def cmd_stop(args: argparse.Namespace) -> int:
    from delayd.daemon import control
    return control.stop(load_config(args), args.timeout)


def cmd_restart(args: argparse.Namespace) -> int:
    """Stop, then start on the running daemon's recipe (its file, variables, flags and start directory,
    as a reload rereads them) under this command's own -c, flags and DELAYD_* variables. The new
    config is built before anything is stopped: one that cannot be used leaves the daemon running."""
    from delayd.daemon import control, launch, start_record
    from delayd.daemon.pidfile import running_master
    here = load_config(args)
    recipe = config_loader(args)
    if running_master(here.pid_path):
        running = start_record.read(here)
        if running is None:
            print("delayd: warning: the running daemon left no record of its start's config "
                  f"({start_record.record_path(here)}); restarting on this command's", file=sys.stderr)
        else:
            recipe = recipe.over(running)
    config = recipe()
    code = control.stop(here, args.timeout)
    return code or launch.start(config, recipe, foreground=False)


def cmd_reload(args: argparse.Namespace) -> int:
    """Check the config as this command reads it (an invalid one: exit 1, nothing signalled), then
    SIGHUP and report the master's own outcome (it rereads with the start's flags and environment)."""
    from delayd.daemon import control
    try:
        pid = control.reload(load_config(args))
    except control.ReloadFailed as exc:
        return fail(f"reload failed: {exc}")
    if not pid:
        return fail("delayd is not running")
    print(f"reloaded (pid {pid})")
    return 0


def fmt_span(seconds: float) -> str:
    """A duration as 3d04h, 2h05m, 7m30s or 12s."""
    s = int(seconds)
    days, hours, minutes = s // 86400, s % 86400 // 3600, s % 3600 // 60
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{s % 60:02d}s" if minutes else f"{s}s"


def cluster_status(args: argparse.Namespace) -> int:
    """Every live daemon on the store (from the registry in Redis), wherever it runs."""
    daemons = client_for(args).daemons()
    if args.json:
        print(json.dumps({"daemons": daemons}, separators=(",", ":")))
        return 0 if daemons else 3
    if not daemons:
        print("no live delayd daemon on this store")
        return 3
    now = time.time()
    print(f"{len(daemons)} live daemon{'s' if len(daemons) != 1 else ''}; every bucket process scans every bucket "
          "and every queue process claims from every bucket (a due task moves once and runs once)")
    width = max(6, *(len(d["id"]) for d in daemons))
    print(f"{'DAEMON':{width}} {'STATE':9} {'VERSION':8} {'UPTIME':>8} {'SEEN':>6} {'BUCKETS':>7} {'QUEUES':>10} "
          f"{'CHILDREN':>9} RESTARTS")
    for d in daemons:
        children = d["children"]  # (the embedded Redis too, as `delayd status` lists it)
        up = sum(1 for c in children if c["pid"])
        looping = sum(1 for c in children if c["crash_looping"])
        print(f"{d['id']:{width}} {d['state']:9} {d['version'][:8]:8} {fmt_span(now - d['started']):>8} "
              f"{d['seen_ago']:>5.1f}s {d['buckets']:>7} {str(d['queues']) + ' x ' + str(d['concurrency']):>10} "
              f"{str(up) + '/' + str(len(children)) + ' up':>9} {sum(c['restarts'] for c in children)}"
              + (f"  {looping} CRASH-LOOPING" if looping else ""))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from delayd.daemon import control
    if args.cluster:
        return cluster_status(args)
    config = load_config(args)
    state = control.status(config)
    if state is None:
        emit(args, {"running": False, "state_dir": config.state_dir},
             f"delayd is not running ({control.looked_in(config)})")
        return 3
    if state.get("starting"):
        emit(args, state, "delayd is starting (its master holds the lock but has not written its pidfile yet)")
        return STARTING_EXIT
    code = DEGRADED_EXIT if state["problems"] else 0
    if args.json:
        print(json.dumps(state, separators=(",", ":")))
        return code
    print(f"delayd is running (pid {state['pid']}, redis {state['redis']})")
    waiting = ["delayd: " + name for name in state["waiting_to_restart"]]
    width = max(28, *(len(p["title"]) for p in state["processes"]), *map(len, waiting))  # (titles whole)
    print(f"{'PID':>7} {'TITLE':{width}} {'STATE':9} {'UPTIME':>9} {'CPU%':>6} {'RSS':>8} RESTARTS")
    for p in state["processes"]:
        flag = "  CRASH-LOOPING" if p["crash_looping"] else ""
        print(f"{p['pid']:>7} {p['title']:{width}} {p['state']:9} {p['uptime']:>8.0f}s {p['cpu_percent']:>6.2f} "
              f"{p['rss'] // 1024:>6}Ki {p['restarts']}{flag}")
    for title in waiting:
        print(f"{'-':>7} {title:{width}} waiting to restart")
    for line in state["problems"]:
        print(f"DEGRADED: {line}")
    return code


VERBS: dict[str, Verb] = {"start": cmd_start, "stop": cmd_stop, "restart": cmd_restart, "reload": cmd_reload,
                          "status": cmd_status}


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    p = with_options(sub, common, "start", "start the daemon")
    p.add_argument("--foreground", action="store_true", help="do not detach (systemd, containers, tests)")
    stop_help = "stop the daemon (a starting one once it is up) and wait until it is gone"
    for name, help, make in (("stop", stop_help, verb_parser),
                             ("restart", "stop, then start the daemon on the running one's config file, variables and "
                                         "flags, under this command's own", with_options)):
        p = make(sub, common, name, help)
        p.add_argument("--timeout", type=non_negative, metavar="S",
                       help="seconds to wait in all, for a starting master too (default graceful_timeout + 15)")
    with_options(sub, common, "reload", "reread the config and replace the workers (SIGHUP)")
    p = verb_parser(sub, common, "status", "show the master and its children (exit 1: a child is down or "
                                           "crash-looping, 3: not running, 4: starting)")
    p.add_argument("--cluster", action="store_true",
                   help="every live daemon on this Redis store, on any host (exit 3: none)")
