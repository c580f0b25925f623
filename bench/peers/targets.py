"""Tenure's targets: the tables behind the Targets section of docs/benchmarks.md.

A target of TARGETS bounds one ratio of bench/aggregate.RATIOS (tenure's median divided
by the best peer's median, same run, same program count) and may bound tenure's own
figures too. A target of COMPONENT_TARGETS bounds one figure of a component benchmark
(bench/owner.py, bench/handoff.py), which only tenure runs, so it has no ratio.
bench/peers/report.py judges each target against a suite result and, under its table,
prints the reason from REASONS for every target that is behind. Only the standard
library, like report.py.
"""

from __future__ import annotations

from dataclasses import dataclass

MET, BEHIND, NOT_MEASURED = "met", "behind", "not measured"

# Why tenure is behind a target: its key -> a short explanation with the measurement
# that shows it. Printed under the Targets table only while that target is behind; an
# empty reason prints "behind; no measured reason recorded".
REASONS: dict[str, str] = {
    "ratio_rss": (
        "three Python processes against supervisord's one. Measured on this machine: an "
        "interpreter that has imported asyncio (without ssl), sqlite3, logging, json and "
        "msgpack is ~17 MiB resident before any tenure code, libpython's pages counted "
        "again in each process, so three of them are ~51 MiB, ~2.6x supervisord, before "
        "tenure's own modules and state (measured at 7b8588c, each added alone to a bare "
        "interpreter of 8.4 MiB: asyncio +6.6 MiB, 105 modules; logging +2.5; sqlite3 "
        "+2.2; json +1.5; msgpack +1.4; then, in the owner, hashlib's OpenSSL +3.4 and "
        "the owner's own modules +2.6). Today with 50 apps: owner 26.4, guardian 25.8, "
        "backend 23.7 MiB; in each, mapped files ~9-12 MiB (libpython 5.1, libc 1.4, "
        "libsqlite3 1.3, and in the owner and the guardian libcrypto 3.4 for Ed25519: "
        "the backend hashes with CPython's own functions and maps none), the rest "
        "Python's objects: ~10 MiB of modules, ~2.5 MiB of interpreter, ~2.5 MiB of "
        "state. Not loading the modules only rare paths use (shutil through argparse's "
        "help width, uuid, secrets, zoneinfo, tomllib at start) took 2.7 MiB off the "
        "three (78.7 to 75.9); glibc's malloc_trim after start would free 0.1-0.3 MiB "
        "per process, so it is not called, and one malloc arena per process "
        "(MALLOC_ARENA_MAX=1) took 0.3 MiB off the three (78.2 -> 77.9 MiB, two starts "
        "of 50 apps each): not set. The docstrings are ~0.8 MiB of each process's "
        "objects (the standard library's included); only `python -OO` drops them, "
        "which also drops every assert and needs bytecode of its own in a sealed "
        "release: not done."),
    "ratio_start_all_running": (
        "in the run below 0.498 s against supervisord's 0.432 s (the run before: "
        "0.508 against 0.434 s). The command's own "
        "waits were cut earlier (see 'command returned': 0.136 -> 0.096 s in "
        "alternating starts) and 'all running' moved within its spread (24 starts "
        "each: 0.557 -> 0.523 s): the command's go reaches the child before the "
        "child's verification of the release ends, so the command is not on this "
        "path. On it until ad8f980: once told to go, the child asked "
        "/proc/locks whether a hung owner or guardian held its lock, and a read of "
        "/proc/locks waits for an RCU grace period when none came shortly before "
        "(7-22 ms here). It now takes the lock shared for two system calls first and "
        "reads /proc/locks only for a lock that is held; the daemons and the window "
        "keep trying their lock for 0.2 s, so that question never refuses them "
        "(without that, 86 of 300 takes of the owner's lock beside a process asking "
        "in a loop failed). "
        "24 cold starts each, alternated in blocks of 4: all running 0.522 -> 0.502 "
        "s, command returned 0.110 -> 0.099 s. Measured, not changed: the owner "
        "creates 39 dataclasses as it imports, 28.7 ms of its start (22 ms compiling "
        "their 209 generated methods), the guardian 20 in 16.1 ms; as NamedTuples "
        "they would take ~0.13 ms each instead of ~0.75, but a record would then be a "
        "tuple (equal to any tuple of its values, serialized as a list by msgpack and "
        "json instead of refused), a change to every record type of the owner, the "
        "process that is meant to change least. Before: "
        "a cold start runs three interpreters, the backend after the other two, on two "
        "CPUs busy most of the time: CPU time spent by each, from /proc (50 apps, "
        "medians of 12 starts): the command ~0.085 s, its forked child ~0.06 s (two "
        "verifications of the release, 1,017 files: 20 and 9 ms on a quiet machine, "
        "and the imports they need), the owner ~0.125 s, the guardian ~0.105 s, the "
        "backend ~0.09 s: ~0.47 s of CPU, so ~0.23 s on two CPUs at best. The "
        "scheduler's own record of one start (ftrace sched_switch, CPU per process in "
        "25 ms steps from the command's start; 50 apps, `tenure up --no-wait`) shows a "
        "chain more than a load: the command runs to ~0.1 s; the child that verifies "
        "the release (~0.1 s of CPU with its imports: 1,017 files hashed) ran from "
        "~0.075 s, after the command line's imports and parse, to ~0.175 s, alone on "
        "one CPU for its last 50 ms; the owner and the guardian then keep both CPUs "
        "busy to ~0.27 s; the guardian, once the owner answers, starts the standby, "
        "which imports alone on one CPU, the other idle, until ~0.40 s; the launches "
        "run to ~0.47 s. The child is now forked as the command starts, before the "
        "command line is imported (backend.cli.early; it starts nothing until the "
        "command has made its checks and says go): the daemons start at ~0.15 s. 12 "
        "starts each, alternated in blocks of 4, on a quiet machine: medians 0.567 -> "
        "0.535 s and 0.545 -> 0.515 s. The child then shares the CPUs with the command "
        "from its start: on a loaded machine (18 starts each, alternated) 'all "
        "running' stayed at 0.777 s and the command returned later, 0.157 -> 0.179 s "
        "(still under that row's target). Two full runs of this code on a machine "
        "loaded by other work (1-minute load up to 1.54 and 1.39) moved every figure, "
        "tenure's and the peers' alike, also on paths the change does not touch "
        "(status CLI 39.1 -> 42.9 and 62.9 ms, the handoff pause 41 -> 43 and 59 ms; "
        "start at 50: tenure 0.623 and 0.73 s, supervisord 0.649 and 0.619 s, circus "
        "0.54 and 0.757 s): the run below, of the code before, stays the published "
        "one. Earlier timeline, with timing probes (medians of 7 runs): the child is "
        "forked at ~0.07 s "
        "and verifies the release while the command parses the config (it returns at "
        "~0.1 s); the owner and the guardian are started at ~0.15 s (~0.2 s before "
        "the child verified beside the parse); the guardian listens at ~0.28 s and "
        "starts the backend's standby interpreter, the owner listens at ~0.31 s; the "
        "standby has imported the backend at ~0.39 s and is activated at once; it "
        "takes the queued config at ~0.40 s and the 50 launches end at ~0.49 s. From "
        "0.15 to 0.3 s both CPUs are busy; from 0.3 s on about one is (the backend and "
        "the owner answer each other). Starting the standby interpreter before the "
        "guardian's own imports (~40 ms earlier) gained nothing in 16 alternating runs "
        "(569 against 551 ms): in that phase the CPUs, not the order, are the limit. "
        "The 50 launches are 50 spawns one after the other in the owner: each Popen "
        "waits (vfork) until its child has exec'd, 0.26-0.38 ms when the child gets a "
        "CPU at once, but two or three of them per start wait 5-24 ms for one (probes "
        "in the owner). The same stall outside tenure: 50 Popens of `sleep` take 0.62 "
        "ms each (median) on an idle machine and 3.6 ms with one busy process beside "
        "them (p90 9 ms), while one CPU is free. Making `status` cheap (the poll asks "
        "every 5 ms) left this figure as it was in 16 alternating runs. In the run "
        "below, on a machine loaded up to 1.37 by other work, supervisord took 0.483 "
        "s, circus 0.573 s, tenure 0.538 s; its five repetitions: supervisord "
        "0.46-0.61, circus 0.47-0.67 and tenure 0.52-0.59 s. The previous published "
        "runs gave supervisord 0.316, circus 0.372, tenure 0.467 s; supervisord 0.337, "
        "circus 0.367, tenure 0.406 s; and circus 0.324, supervisord 0.351, tenure "
        "0.367 s. The code of two of those runs, 50 apps, 6 starts each, alternated "
        "twice on the same machine: medians 0.399 and 0.417 s against 0.467 and 0.386 "
        "s, so such rises are the machine's load, not the code. "
        "The owner's descriptor table sized at start (see the owner's launches below) "
        "took ~20 ms off in 8 alternating starts (medians 0.468 -> 0.450 s). "
        "Probes of one start on a quieter machine (0.441 s): the command "
        "forks its child at 56 ms and returns at 93 ms; the child's verification ends "
        "at 123 ms and it starts the owner and the guardian; the owner's interpreter "
        "and imports run to 244 ms (its daemon's imports alone ~67 ms, asyncio "
        "included), it listens at 258 ms; the guardian fences at 272 ms; the standby "
        "has imported the backend at 338 ms; the 50 launches end at 426 ms. The owner "
        "alone, started by hand in a fresh home on an idle machine, listens after 125-172 "
        "ms (110-160 ms of CPU): of its ~117 ms of imports, 28.6 ms create its 38 "
        "dataclasses (a frozen one execs six generated methods; 40 such classes take ~34 "
        "ms here, as msgspec Structs ~0.8 ms, but importing msgspec costs a process ~10 "
        "ms and 1.4 MiB: measured, not changed yet), and ~20 ms unmarshal bytecode. "
        "Turning the garbage collector off during the start changed nothing clear (8 "
        "alternating runs)."),
    "ratio_start_returned": (
        "until ddfff52: every `tenure up` asked /proc/locks whether a `tenure down` runs, "
        "and the first read of /proc/locks in a process waits for an RCU grace period "
        "(10-15 ms here); the lock's own text is read first now. The command made the "
        "parser of each of its 24 commands, 80 gettext lookups (4-6.5 ms), and "
        "imported logging with the queued config's state machine (5-6.5 ms): only the "
        "command's own parser is made, and the queued config's file has a module of its "
        "own. Alternating starts, 50 apps: 0.136 -> 0.096 s. Before: "
        "`tenure up --no-wait` returns once the config is parsed (a bad one starts "
        "nothing) and queued, then verifies the release and starts the daemons in a "
        "forked child, as supervisord returns once it has forked. With 50 apps, 7 runs: "
        "108 ms median, of it the interpreter's start and the CLI's imports (~85 ms; "
        "msgspec's alone ~20 ms), the config parse (~8 ms) and the queue's atomic write "
        "(~3 ms). The command no longer loads typing_extensions with msgspec, OpenSSL's "
        "hashes, shutil for argparse's help width, or the socket address parser for a "
        "config without sockets: alternating runs, 125.5 -> 108.9 ms with 200 apps, "
        "113.6 -> 93.4 ms with 50. At the margin where behind: the peers' own figure "
        "moves by a third between runs (circus at 200: 0.161 s in one run, 0.107 s in "
        "the next, against tenure's 0.091 and 0.110 s); in the run before the change "
        "0.91x at 50 and 1.02x at 200, since then 0.70x and 0.81x, 0.72x and 0.78x, "
        "0.85x and 1.04x (tenure 0.093 and 0.109 s; supervisord 0.109 s at 50, circus "
        "0.105 s at 200), 0.66x and 0.72x, 0.95x and 0.80x, 0.73x and 0.81x, 0.67x and "
        "0.85x (tenure 0.075 and 0.085 s; circus 0.112 and 0.100 s), 0.89x and 0.93x, "
        "and in the run below 0.71x and 0.78x. "
        "The waiting "
        "`tenure up` returns at about the 'all running' time, with the apply's outcome "
        "and the status table."),
    "ratio_status": (
        "at the margin, by noise: tenure status took 39-41 ms with 50 programs and "
        "46-54 ms with 200 in runs of this day, circus's 145-152 ms at 200: the "
        "interpreter's start (~13 ms), the client's imports (~20 ms) and the backend's "
        "answer (at 200: ~9 ms until CPU and memory figures were reused for 0.5 s, "
        "now 1.5-2 ms)."),
    "ratio_restart": (
        "the restart crosses two processes and four socket hops on two CPUs, and the "
        "benchmark sees it through the API, asked every 0.5 ms. In the run below "
        "tenure took 3.77 ms at 50 and 4.65 ms at 200, supervisord 7.01 and 8.15 ms: "
        "0.54x and 0.57x (five kills per repetition; tenure's 25 kills at 200 ranged "
        "3.57-5.97 ms, supervisord's 6.46-12.1 ms); the runs before it, of the same "
        "restart path, 0.63x and 0.40x (3.98 and 4.03 against 6.28 and 10.0 ms) and "
        "0.41x and 0.43x (3.8 and 4.3 against 9.3 and 10.2 ms). The code of ad8f980 "
        "against the code before it, 200 apps, 6 alternated blocks of 30 kills, twice: "
        "4.81 against 4.61 ms and 4.10 against 4.34 ms. Probes of 40 kills "
        "at 57d4b9f (50 apps, a loaded machine; medians from the kill): the owner takes "
        "up the exit at 0.79 ms and sends it at 1.08; the backend has it at 1.31 and "
        "has handled it at 1.59 (recording the transition 0.11 ms, its actions 0.14); "
        "its zero-delay backoff fires at 1.64, the launch task runs at 1.82 and sends "
        "at 1.91; the owner takes it up at 2.27, has committed the starting row at "
        "2.66, spawned at 3.34 (Popen 0.67 ms), watched the process at 3.61 and "
        "answered at 3.81; the poller sees the new pid at 5.17 ms. Launching at once "
        "where the backoff is zero would save ~0.2 ms, within the spread: not "
        "changed. The owner commits a lone launch's rows at once, but counted the "
        "poller's questions (open on the owner through `inspect`) as company to wait "
        "a loop turn for; counting open launches alone left the figure where it was "
        "(8 alternating runs of 40 kills: 3.14 against 3.24 ms): not kept. "
        "Earlier: 4.01 and 4.09 ms against 7.79 and 9.73 ms, 0.51x and 0.42x "
        "(the five repetitions at 50: tenure 3.02-4.61 ms, supervisord 6.25-10.9 ms), "
        "where the previous published runs gave 0.65x and "
        "0.47x (3.74 and 4.46 against 5.77 and 9.48 ms), 0.71x and 0.43x, 0.76x "
        "and 0.56x (3.33 and 3.72 against 4.39 and 6.66 ms), 0.69x and 0.52x, 0.66x "
        "and 0.61x, 0.58x and 0.46x, 0.63x and 0.65x, 0.80x and 0.47x, 0.63x and "
        "0.44x, 0.63x and 0.61x, 0.43x and 0.53x, 0.62x and 0.43x. The owner's own "
        "part moved with the machine across these runs (bench/owner.py's exit event "
        "p50: 338, 348, 325, 312, 313, 420 and, in the run below, 439 us, 421-485 us "
        "in its repetitions). What fell "
        "earlier: the owner read a new process's start ticks from /proc/PID/stat while the child "
        "was still inside its exec, ~0.9 ms in the median on an otherwise idle machine; "
        "they now come from the boot clock read around the fork (exact; /proc only when "
        "the two readings straddle a tick). Medians of 45 kills with 50 apps and timing "
        "probes, from the kill: the owner's loop takes up the exit at 0.47 ms (the "
        "kernel's teardown and the wake-up of a halted CPU), sends it at 0.71 ms after "
        "its last look for descendants (0.12 ms) and the reap; the backend has it 0.37 "
        "ms later and sends the launch 0.34 ms after that (two loop turns: the zero "
        "backoff timer and the task); the owner takes it up 0.27 ms later, commits the "
        "starting row (0.28 ms), spawns (Popen: vfork and exec, 0.47 ms), commits the "
        "running row (0.23 ms) and answers; the poller sees the new pid 0.58 ms after "
        "the launch was recorded: 3.43 ms in all, the exit to the relaunch 2.87 -> 1.93 "
        "ms with the clock's ticks. Idle CPUs of this virtual machine halt (no guest "
        "halt-polling), so every hop to a process on the other CPU pays its wake-up: a "
        "ping-pong between two processes with 0.5 ms between rounds took 100 us a "
        "round across CPUs, 19 us on one. Asking the owner `inspect`'s two questions at "
        "once took 0.4-0.7 ms off earlier. Leaving out the sockets question makes "
        "`inspect` 0.42 -> 0.15 ms a call, but two tenures side by side with their "
        "kills alternated (60 each) took longer with it in 49 and 44 of 60 kills: the "
        "poller asks more often and the owner idles between questions; not taken. "
        "Reporting the exit before the last look took 0.3-0.45 ms off but was not "
        "kept: the exit would be known before what outlived the app is attributed "
        "(docs/owner.md, process-group mode). No fsync is on the path; the owner decides "
        "nothing on its own, so the backend's decision is two hops away. Figures move "
        "by a third between runs with the machine's load. With 200 apps two steps of "
        "each exit walked every launch (the list of pipe drainers, rebuilt twice, and "
        "the map of tracked descendants, rebuilt to find it unchanged); both are now "
        "kept by key and by a revision: 3.83 -> 3.44 and 4.16 -> 3.74 ms, faster in 43 "
        "of 60 kills both times (side by side, alternated). What still grows with the "
        "apps is the last look's list of the owner's children, which the kernel "
        "builds: 31, 81 and 316 us with 50, 200 and 1,000 children. Probes of 40 kills "
        "at each size (medians): the whole took ~0.6 ms longer with 200 apps than with "
        "50, in three steps of the owner: the last look +0.16 ms, the spawn +0.25 ms "
        "(the child gets a copy of the owner's descriptor table, three per app, and "
        "closes it before its exec) and the running row +0.18 ms. Asking the owner "
        "nothing for an app without sockets made `inspect` 0.5 -> 0.17 ms but the kills "
        "slower, as before (4 alternating runs of 40 kills at each size: 3.8-4.9 -> "
        "5.0-6.1 ms): between fewer questions the owner's CPU halts, and waking it "
        "costs more than the questions did; not taken."),
    "ratio_logs": (
        "by the machine's load, at the margin: tenure drains the writer's pipe faster than "
        "supervisord does (the writer ran 0.68-0.94 s under tenure, 0.97-1.50 s under "
        "supervisord, 0.73-1.01 s alone, in the five repetitions of the run published at "
        "3730df1) and commits the lines to its SQLite journal behind it, the last ~0.2-0.5 s "
        "after the writer ended; supervisord appends to a file as it reads. So the figure is "
        "the journal's commit rate: 1.14, 1.09, 0.87, 0.88 and 0.77 M lines/s in the five "
        "repetitions, falling as the load rose (0.35 to 1.30), none lost. The previous full "
        "run, with the same journal code, measured 1.33 M lines/s, 1.11x supervisord. Since "
        "retention counts each record's cost (~32 bytes besides the line), the scenario's app "
        "is given a budget that holds the whole run, as supervisord is told to keep everything "
        "(maxbytes=0): under the default 64 MiB the journal kept the last ~795,000 lines of "
        "the million."),
    "ratio_replace_returned": (
        "a backend upgrade checks the candidate before the incumbent is touched: its "
        "standby starts (interpreter and standard library ~70 ms, overlapping the "
        "release's verification), imports the backend (~40 ms) and reports: `checked` "
        "takes ~0.11 s with 200 apps; then the pause (drain, checkpoint, fence, retire, "
        "activate; the standby parsed the config meanwhile) ~0.05 s; the command's own "
        "start ~0.05 s. 0.22 s at 200 apps in the run published at 3730df1, 0.26 s in "
        "the run below (a machine loaded up to 1.37)."),
    # component benchmarks (COMPONENT_TARGETS)
    "spawn_per_s": (
        "two launches of every 200 in a fresh owner stalled for 12-35 ms each, until "
        "the owner sized its descriptor table at start: the kernel grew the table "
        "(256 -> 512 -> 1,024 slots) under launches 77 and 162, and in a process with "
        "threads (the journal's) each growth waits for an RCU grace period. 6 "
        "alternating runs of 200 launches: 739-860/s (median ~813) -> 942-1213/s "
        "(~978). What remains is "
        "one launch call after another, each answered before the next is sent, so the "
        "figure is a round trip: ~1.0-1.4 ms on this machine. Taking the new process's "
        "start ticks from the boot clock instead of /proc (see kill -9 above) raised it "
        "from 726-765 to 801-981/s in 3 runs each on a quiet machine, 661 to 698/s in "
        "the published runs. In the run below 947/s (its five repetitions: "
        "875-1,012/s); in the three runs before, 879/s (811-1,040/s, the machine "
        "loaded up to 1.39 by other work), 985/s and 870/s (642-921/s); medians 1,019, "
        "1,195, 1,029, 1,114, 1,186, 1,231 and 1,210/s in the seven published runs "
        "before, and 763/s, 700-833/s, before the descriptor table was sized. The code "
        "of the run before (3730df1) and of the run below, 4 x 200 launches each, "
        "alternated right after it: 650-940/s against 843-944/s, so the fall is the "
        "machine's. "
        "Probes in the owner, 300 "
        "launches at ~980/s, medians per launch: the request decoded and checked, to "
        "the starting row's commit 77 us; that commit 65 us; Popen ~0.41 ms (vfork: the "
        "owner waits until the child has exec'd; 0.3-0.4 ms in a bare process on this "
        "machine too); the launch's bookkeeping 60 us; the running row's commit 65 us; "
        "writing the answer 73 us (the write wakes the client on the other CPU); the "
        "client's next request comes 51 us later. os.posix_spawn changed the rate by no "
        "more than the noise (4 alternating runs of 5 x 150 launches: medians 750-964 "
        "against 693-900/s), and in Python 3.11 it cannot set a working directory or "
        "close inherited fds, which a launch needs: not kept. Launches that come "
        "together share their commits (the start of 200 apps above); a launch that "
        "nothing can join commits its rows at once instead of waiting two turns of "
        "the loop (alternating runs of 300 launches: ~900 -> ~970/s, 8 of 10 pairs "
        "faster). Popen lets go of the GIL while it waits for the exec, so a spawn "
        "thread could overlap it with the loop's work: a prototype changed nothing "
        "for a burst of 200 launches (~170 ms either way, 3 x 3 runs) and would add "
        "two thread hops to every lone launch; not kept. Probes at ad8f980 (600 "
        "launches, one after another, medians): the owner's launch 0.64 ms, of which "
        "Popen 0.32 ms, the two commits 0.083 ms each and the watch 0.045 ms; the "
        "call's round trip ~0.9-1.0 ms, where a `ping` takes 0.083 ms."),
    "log_lines_per_s": "",
    "owner_rss_mb_1000": "",
    "pause_p50_ms": (
        "with 200 apps (bench/handoff.py's default; with 50 apps the pause is ~35-46 ms). "
        "The pause ends at the new generation's first answer to `status`, whose CPU and "
        "memory figures the owner had to measure for all 200 apps (~4 ms); it now "
        "answers a new connection with its last measurement, if younger than 2 s (4 "
        "alternating runs: 56-83 -> 50-63 ms). The guardian's diagnostics file (~0.9 "
        "ms a phase) was moved to its loop's next turn, and the checkpoint is read "
        "for the verification only after the candidate started (7 alternating runs: "
        "50.6 -> 48.4 ms). The "
        "order is the handoff's safety: the candidate acts only once the incumbent is "
        "fenced, has exited and closed its stores, so two generations never act at "
        "once. Inside the pause the guardian's own work competed for the two CPUs: each "
        "phase change rewrote its diagnostics file (~0.9 ms of CPU with 200 apps, six "
        "times from the drain to the end); it is now written 0.1 s after the first "
        "change, once for all (alternating runs, 6 x 10 handoffs each: 54.9 -> 44.0 "
        "ms). Before that, four round trips or their cost left the pause (6 x 10 "
        "alternating: 49.8 -> 46.1 ms): the handoff's calls to the incumbent share one "
        "connection (~1.3 ms of the retire's call and ~0.4 ms of the checkpoint's had "
        "been the connection), the fence takes the owner's epoch from the check (~1.5 ms), "
        "the candidate asks for the owner's inventory once (~1.2 ms) and imports the "
        "home watch before its activation (~0.9 ms). Probes of 10 handoffs with "
        "these changes (pause p50 38.6 ms), from the drain: the checkpoint written 4.4 "
        "ms, the fence 2.9, the retire until the guardian sees the incumbent's exit "
        "6.0 (its close 2.0, the exit ~2.4), the candidate from its activation until "
        "its API listens 12.4 (the checkpoint read and checked 1.9; the inventory, "
        "the intents and 200 instances restored 4.7; the owner's handshake 1.2; its "
        "stores 1.3), its first answer ~2.8 ms later. The pause moves with the "
        "machine's load: the five repetitions of the run below gave 40.0, 44.9, 41.3, "
        "35.9 and 43.6 ms (the machine loaded up to 1.37), those of the previous "
        "published runs 33.7, 30.4, 26.6, 31.8 and 34.9 ms, 28.5, 26.8, 31.3, 24.9 "
        "and 22.6 ms and 27.6, 28.1, 27.4, 30.7 and 27.5 ms, and before the changes "
        "that took it under 50 ms "
        "43.4, 64.0, 70.0, 67.7 and 42.0 ms."),
    "upgrade_call_p50_ms": "",
}


@dataclass(frozen=True)
class Target:
    # a ratio key of bench/aggregate.RATIOS, or with ``component`` a figure of that
    # component benchmark's JSON
    key: str
    label: str
    unit: str  # of the figure behind the ratio
    at_most: float | None = None  # the ratio's maximum
    at_least: float | None = None  # the ratio's minimum (where higher is better)
    figure_at_most: float | None = None  # the maximum of tenure's own median
    figure_at_least: float | None = None  # the minimum of tenure's own median
    # (figure, words): tenure's figures of the same scenario that must be 0 in every
    # repetition (judged on their worst run)
    zero: tuple[tuple[str, str], ...] = ()
    ns: tuple[int, ...] = ()  # the program counts judged; () judges every count run
    # the component benchmark ("owner", "handoff") whose figure ``key`` is; "" for a
    # ratio target
    component: str = ""

    @property
    def reason(self) -> str:
        return REASONS.get(self.key, "")

    def text(self) -> str:
        """The target as the table shows it, e.g. '≥ 1.00x; 0 lines lost'."""
        parts = []
        if self.at_most is not None:
            parts.append(f"≤ {self.at_most:.2f}x")
        if self.at_least is not None:
            parts.append(f"≥ {self.at_least:.2f}x")
        if self.figure_at_most is not None:
            parts.append(f"≤ {self.figure_at_most:,g} {self.unit}")
        if self.figure_at_least is not None:
            parts.append(f"≥ {self.figure_at_least:,g} {self.unit}")
        parts += [f"0 {words}" for _, words in self.zero]
        return "; ".join(parts)

    def outcomes(self, ratio: float | None, figure: float | None,
                 zeros: list[float | None]) -> list[bool | None]:
        """Each bound: True met, False missed, None not measured."""
        out = []
        if self.at_most is not None:
            out.append(_at_most(ratio, self.at_most))
        if self.at_least is not None:
            out.append(None if ratio is None else ratio >= self.at_least)
        if self.figure_at_most is not None:
            out.append(_at_most(figure, self.figure_at_most))
        if self.figure_at_least is not None:
            out.append(None if figure is None else figure >= self.figure_at_least)
        return out + [_at_most(v, 0) for v in zeros]

    def verdict(self, ratio: float | None, figure: float | None,
                zeros: list[float | None]) -> str:
        """BEHIND if any bound is missed, else NOT_MEASURED if any is unknown, else MET."""
        out = self.outcomes(ratio, figure, zeros)
        if False in out:
            return BEHIND
        return NOT_MEASURED if None in out or not out else MET


def _at_most(v: float | None, limit: float) -> bool | None:
    return None if v is None else v <= limit


TARGETS = [
    Target("ratio_rss", "supervisor RSS", "MiB", at_most=2.0),
    Target("ratio_start_all_running", "start: command to all running", "s", at_most=0.7),
    Target("ratio_start_returned", "start: command returned", "s", at_most=1.0),
    Target("ratio_status", "status CLI, median", "ms", at_most=0.35),
    Target("ratio_restart", "kill -9 to new pid reported, median", "ms", at_most=0.5),
    Target("ratio_logs", "log lines captured per second", "lines/s", at_least=1.0,
           zero=(("lost", "lines lost"),)),
    # absolute: the ratio is shown for information only
    Target("ratio_replace_returned", "control-plane replacement: command returned", "s",
           figure_at_most=0.3, zero=(("pids_changed", "program pids changed"),), ns=(200,)),
]

# Tenure's own figures from its component benchmarks, run by bench/suite.py with the
# arguments in its config; no peer has these parts, so no ratio. The bounds are the
# project's performance targets, set for the full run's arguments.
COMPONENT_TARGETS = [
    Target("spawn_per_s", "owner: launches per second", "launches/s",
           figure_at_least=1000, component="owner"),
    Target("log_lines_per_s", "owner: log lines committed per second", "lines/s",
           figure_at_least=200_000, zero=(("log_lines_lost", "lines lost"),),
           component="owner"),
    Target("owner_rss_mb_1000", "owner: RSS with the idle apps", "MiB",
           figure_at_most=60, component="owner"),
    Target("pause_p50_ms", "handoff: control-plane pause, median", "ms",
           figure_at_most=50, zero=(("app_restarts", "app restarts"),
                                    ("log_lines_lost", "lines lost")),
           component="handoff"),
    Target("upgrade_call_p50_ms", "handoff: upgrade call, median", "ms",
           figure_at_most=300, component="handoff"),
]
