"""The checks of deploy/validate: the image definition, its build context and runtime, the compose file with
its nginx configuration, and the Kubernetes manifests. Run by deploy/validate with the pinned tools' venv.

    checks.py dockerfile | context | runtime | compose | k8s

Every check prints what it looked at and exits non-zero with the reasons when something is wrong. hivegate
itself (HIVEGATE_BIN) is asked about every configuration the deployment files give it (`hivegate config
check`), always with a clean environment, so that nothing from the caller's environment leaks in.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.request
from pathlib import Path

import crossplane
import yaml

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
VENV_BIN = Path(sys.executable).parent
OUT = Path(os.environ.get("DEPLOY_OUT", ROOT / "target" / "deploy"))
BIN = Path(os.environ.get("HIVEGATE_BIN", ROOT / "target" / "debug" / "hivegate")).resolve()
PROBLEMS: list[str] = []


def say(message: str) -> None:
    print(f"  {message}", flush=True)


def problem(message: str) -> None:
    PROBLEMS.append(message)
    print(f"  PROBLEM: {message}", flush=True)


def finish(what: str) -> None:
    if PROBLEMS:
        print(f"deploy/validate: {what}: {len(PROBLEMS)} problem(s)", file=sys.stderr)
        sys.exit(1)


# --- the Dockerfile --------------------------------------------------------------------------------------


class Stage:
    def __init__(self, image: str, name: str | None):
        self.image = image
        self.name = name
        self.instructions: list[tuple[str, str]] = []

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]

    def last(self, keyword: str) -> str | None:
        found = self.all(keyword)
        return found[-1] if found else None


def parse_dockerfile(path: Path) -> list[Stage]:
    """The stages of a Dockerfile with their instructions (continuation lines joined, comments dropped)."""
    stages: list[Stage] = []
    logical: list[str] = []
    current = ""
    for raw in path.read_text().splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") and not current:
            continue
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        current += stripped
        if current.strip():
            logical.append(current.strip())
        current = ""
    for line in logical:
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        args = args.strip()
        if keyword == "FROM":
            parts = args.split()
            parts = [p for p in parts if not p.startswith("--")]
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(parts[0], name))
        elif stages:
            stages[-1].instructions.append((keyword, args))
    return stages


def exec_form(args: str) -> list[str]:
    args = args.strip()
    if args.startswith("["):
        return json.loads(args)
    return ["/bin/sh", "-c", args]


def parse_env(args: str) -> dict[str, str]:
    """ENV KEY=VALUE ... (the legacy `ENV KEY VALUE` form too)."""
    tokens = shlex.split(args)
    if tokens and "=" not in tokens[0]:
        return {tokens[0]: " ".join(tokens[1:])}
    return dict(token.split("=", 1) for token in tokens)


def parse_copy(args: str) -> tuple[dict[str, str], list[str], str]:
    tokens = shlex.split(args)
    flags = {}
    while tokens and tokens[0].startswith("--"):
        key, _, value = tokens.pop(0)[2:].partition("=")
        flags[key] = value
    if tokens and tokens[0].startswith("["):
        tokens = json.loads(" ".join(tokens))
    return flags, tokens[:-1], tokens[-1]


class Image:
    """What the Dockerfile says about the build and the runtime image."""

    def __init__(self) -> None:
        stages = parse_dockerfile(ROOT / "Dockerfile")
        if len(stages) < 2:
            raise SystemExit("deploy/validate: the Dockerfile should have a build stage and a runtime stage")
        self.stages = stages
        self.runtime = stages[-1]
        self.build = next((s for s in stages if s.name == "build"), stages[0])
        self.env: dict[str, str] = {}
        for args in self.runtime.all("ENV"):
            self.env.update(parse_env(args))
        self.user = self.runtime.last("USER")
        self.workdir = self.runtime.last("WORKDIR")
        entrypoint = self.runtime.last("ENTRYPOINT")
        cmd = self.runtime.last("CMD")
        self.entrypoint = exec_form(entrypoint) if entrypoint else []
        self.cmd = exec_form(cmd) if cmd else []
        healthcheck = self.runtime.last("HEALTHCHECK") or ""
        self.healthcheck = exec_form(healthcheck.split("CMD", 1)[1]) if "CMD" in healthcheck else []
        self.exposed = [int(p.split("/")[0]) for args in self.runtime.all("EXPOSE") for p in args.split()]
        # COPY in the runtime stage: (from stage or None, sources, destination).
        self.runtime_copies = [parse_copy(a) for a in self.runtime.all("COPY")]
        self.build_copies = [parse_copy(a) for a in self.build.all("COPY")]

    def uid_gid(self) -> tuple[int, int]:
        user = self.user or "0"
        uid, _, gid = user.partition(":")
        if not uid.isdigit() or (gid and not gid.isdigit()):
            raise SystemExit(f"deploy/validate: USER {user} should be numeric (uid:gid) for runAsNonRoot")
        return int(uid), int(gid or uid)

    def binary_path(self) -> str:
        for flags, sources, dest in self.runtime_copies:
            if flags.get("from") and any(s.endswith("/hivegate") for s in sources):
                return dest if not dest.endswith("/") else dest + "hivegate"
        raise SystemExit("deploy/validate: the runtime stage copies no hivegate binary from the build stage")

    def config_copies(self) -> list[tuple[str, str]]:
        """(context path, image path) of the files the runtime stage copies from the build context."""
        found = []
        for flags, sources, dest in self.runtime_copies:
            if flags.get("from"):
                continue
            for source in sources:
                target = dest + Path(source).name if dest.endswith("/") else dest
                found.append((source, target))
        return found


def check_dockerfile() -> None:
    image = Image()
    say("stages: " + ", ".join(f"{s.name or '?'} ({s.image})" for s in image.stages))
    uid, gid = image.uid_gid()
    if uid == 0:
        problem("the runtime stage runs as root (USER)")
    say(f"runtime user {uid}:{gid}, workdir {image.workdir}, entrypoint {image.entrypoint + image.cmd}")
    if image.healthcheck[-1:] != ["healthcheck"]:
        problem(f"HEALTHCHECK should run `hivegate healthcheck`, not {image.healthcheck}")
    for key in ("HIVEGATE_CONFIG", "HIVEGATE_LISTEN", "HIVEGATE_DATABASE_URL"):
        if key not in image.env:
            problem(f"the runtime stage sets no {key}")
    listen_port = int(image.env.get("HIVEGATE_LISTEN", ":0").rsplit(":", 1)[1])
    if listen_port not in image.exposed:
        problem(f"EXPOSE {image.exposed} does not include the listen port {listen_port}")
    labels = " ".join(image.runtime.all("LABEL"))
    for label in ("org.opencontainers.image.title", "org.opencontainers.image.version"):
        if label not in labels:
            problem(f"the runtime stage has no label {label}")
    # The runtime must be the Debian release the binary was linked on (glibc).
    build_release = image.build.image.rsplit("-", 1)[-1]
    if build_release not in image.runtime.image:
        problem(f"build image {image.build.image} and runtime image {image.runtime.image} differ in Debian release")
    # The build image's Rust is at least the crate's rust-version.
    manifest = tomllib.loads((ROOT / "Cargo.toml").read_text())
    wanted = manifest["package"].get("rust-version")
    match = re.match(r"rust:(\d+)\.(\d+)", image.build.image)
    if wanted and match:
        have = (int(match[1]), int(match[2]))
        need = tuple(int(x) for x in wanted.split(".")[:2])
        if have < need:
            problem(f"{image.build.image} is older than the crate's rust-version {wanted}")
    version_arg = next((a.split("=", 1)[1] for a in image.runtime.all("ARG") if a.startswith("VERSION=")), None)
    if version_arg and version_arg != manifest["package"]["version"]:
        problem(f"ARG VERSION={version_arg} (the image's version label) is not the crate's version "
                f"{manifest['package']['version']}")
    bins = [b.get("name") for b in manifest.get("bin", [])] or [manifest["package"]["name"]]
    if "hivegate" not in bins:
        problem("Cargo.toml has no `hivegate` binary for `cargo build --bin hivegate`")
    finish("Dockerfile")


# --- the build context -----------------------------------------------------------------------------------


def dockerignore_patterns() -> list[tuple[bool, re.Pattern[str]]]:
    """.dockerignore as (negated, regex) in order; the last pattern that matches a path or a parent wins."""
    patterns = []
    path = ROOT / ".dockerignore"
    if not path.exists():
        return patterns
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        line = line[1:].strip() if negated else line
        line = os.path.normpath(line.lstrip("/"))
        regex = ""
        i = 0
        while i < len(line):
            if line.startswith("**/", i):
                regex += "(.*/)?"
                i += 3
            elif line.startswith("**", i):
                regex += ".*"
                i += 2
            else:
                char = line[i]
                regex += "[^/]*" if char == "*" else "[^/]" if char == "?" else re.escape(char)
                i += 1
        patterns.append((negated, re.compile(f"^{regex}$")))
    return patterns


def excluded(relative: str, patterns: list[tuple[bool, re.Pattern[str]]]) -> bool:
    parts = relative.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    result = False
    for negated, regex in patterns:
        if any(regex.match(c) for c in candidates):
            result = not negated
    return result


def dep_info(binary: Path) -> set[Path]:
    """The files the compiler read for the hivegate crate: cargo's dep-info next to the binary (written by
    `cargo build`) and rustc's for every build of the crate in that profile's deps/ (`cargo test` writes
    only these). Files since deleted are left out."""
    d_files = [binary.with_name(binary.name + ".d")] + sorted((binary.parent / "deps").glob("hivegate-*.d"))
    d_files = [d for d in d_files if d.exists()]
    if not d_files:
        raise SystemExit(f"deploy/validate: no dep-info for {binary}: build it with cargo first")
    paths: set[Path] = set()
    for d_file in d_files:
        for line in d_file.read_text().replace("\\\n", " ").splitlines():
            if not line.strip() or line.startswith("#"):
                continue
            target, _, deps = line.partition(": ")
            candidates = [target.rstrip(":")] if not deps and line.rstrip().endswith(":") else []
            candidates += [p.replace("\\ ", " ") for p in re.split(r"(?<!\\) ", deps.strip()) if p]
            for candidate in candidates:
                path = Path(candidate) if Path(candidate).is_absolute() else ROOT / candidate
                if path.is_file():
                    paths.add(path)
    return paths


def check_context() -> None:
    image = Image()
    patterns = dockerignore_patterns()
    # Every file the Dockerfile copies from the context exists and is not left out by .dockerignore.
    build_sources: list[str] = []
    for _, sources, _ in image.build_copies:
        build_sources += sources
    for source in build_sources + [s for s, _ in image.config_copies()]:
        if not (ROOT / source).exists():
            problem(f"COPY {source}: no such file in the repository")
        elif excluded(os.path.normpath(source), patterns):
            problem(f"COPY {source}: left out of the build context by .dockerignore")
    say(f"COPY sources present and in the context: {', '.join(build_sources + [s for s, _ in image.config_copies()])}")

    # Every file the compiler read for the binary is copied into the build stage and is in the context.
    read = []
    for path in dep_info(BIN):
        try:
            relative = path.resolve().relative_to(ROOT)
        except ValueError:
            continue  # outside the repository: the toolchain's or the registry's
        if relative.parts[0] == "target":
            continue  # generated during the build
        read.append(relative.as_posix())
    for relative in read:
        covered = any(
            relative == os.path.normpath(s) or relative.startswith(os.path.normpath(s).rstrip("/") + "/")
            for s in build_sources
        )
        if not covered:
            problem(f"the binary is compiled from {relative}, which the build stage does not COPY")
        elif excluded(relative, patterns):
            problem(f"the binary is compiled from {relative}, which .dockerignore leaves out of the context")
    say(f"the {len(read)} source files of the crate (from cargo's dep-info) are all copied into the build stage")

    # The dependency stage: the first COPY (manifest and lockfile) plus the placeholder crate is a valid,
    # locked package whose targets `cargo build --release --locked` builds.
    first_sources = image.build_copies[0][1] if image.build_copies else []
    with tempfile.TemporaryDirectory(prefix="hivegate-deps-stage.") as tmp:
        for source in first_sources:
            shutil.copy(ROOT / source, Path(tmp) / Path(source).name)
        (Path(tmp) / "src").mkdir()
        (Path(tmp) / "src" / "main.rs").write_text("fn main() {}\n")
        (Path(tmp) / "src" / "lib.rs").write_text("")
        result = subprocess.run(
            ["cargo", "metadata", "--locked", "--format-version", "1"],
            cwd=tmp,
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            problem(f"the dependency stage (COPY {' '.join(first_sources)} + placeholder) fails: {result.stderr.strip()}")
        else:
            package = next(p for p in json.loads(result.stdout)["packages"] if p["name"] == "hivegate")
            kinds = sorted({k for t in package["targets"] for k in t["kind"]})
            say(f"dependency stage: Cargo.lock is current (--locked) and the placeholder crate has targets {kinds}")
    finish("build context")


# --- running hivegate ------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(extra: dict[str, str]) -> dict[str, str]:
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
    env.update(extra)
    return env


def setting(text: str, key: str, pattern: str = r"(\d+)") -> str | None:
    """One value from `hivegate config check`'s output (`key: value` or `key = value`)."""
    match = re.search(rf"\b{key}[\s:=]+{pattern}", text, re.S)
    return match[1] if match else None


def config_check(what: str, env: dict[str, str], binary: Path = BIN) -> dict[str, str] | None:
    """`hivegate config check` with exactly `env`; the printed configuration, or None (a problem)."""
    result = subprocess.run(
        [str(binary), "config", "check"],
        env=clean_env(env),
        cwd=tempfile.gettempdir(),
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        problem(f"{what}: hivegate refuses the configuration: {result.stderr.strip()}")
        return None
    return {"text": result.stdout}


def check_runtime() -> None:
    """The binary as the image runs it: its uid, paths and env, and its HEALTHCHECK."""
    image = Image()
    uid, gid = image.uid_gid()
    as_root = os.geteuid() == 0
    root = Path(tempfile.mkdtemp(prefix="hivegate-image."))
    root.chmod(0o755)
    process = None
    try:
        # The image's file system, under `root`.
        binary = root / image.binary_path().lstrip("/")
        binary.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(BIN, binary)
        for source, target in image.config_copies():
            dest = root / target.lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / source, dest)
            dest.chmod(0o644)
        workdir = root / (image.workdir or "/").lstrip("/")
        workdir.mkdir(parents=True, exist_ok=True)
        for directory in [p for p in root.rglob("*") if p.is_dir()]:
            directory.chmod(0o755)
        if as_root:
            os.chown(workdir, uid, gid)

        # The image's environment, with its paths moved under `root` and a free port.
        port = free_port()
        image_paths = sorted({str(Path(t).parent) for _, t in image.config_copies()} | {image.workdir or "/"}, key=len)
        env = {}
        for key, value in image.env.items():
            for image_path in reversed(image_paths):
                if image_path != "/":
                    value = value.replace(image_path, str(root / image_path.lstrip("/")))
            env[key] = value
        listen_host = env["HIVEGATE_LISTEN"].rsplit(":", 1)[0]
        env["HIVEGATE_LISTEN"] = f"{listen_host}:{port}"
        env["PATH"] = f"{binary.parent}:" + clean_env({})["PATH"]
        # As the deploy files set it, to see the env array syntax work end to end.
        env["HIVEGATE_MCP__ALLOWED_HOSTS"] = '["hivegate.example.com"]'
        env["HIVEGATE_ADMIN_TOKEN"] = "validate-" + os.urandom(16).hex()
        shown = {k: v for k, v in env.items() if k.startswith("HIVEGATE_") and k != "HIVEGATE_ADMIN_TOKEN"}
        say(f"image file system under {root}; env {shown}")

        prefix = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups"] if as_root else []
        if not as_root:
            say("not root: running as the current user instead of the image's uid")
        healthcheck = prefix + image.healthcheck

        def probe() -> subprocess.CompletedProcess[str]:
            return subprocess.run(healthcheck, env=env, cwd=workdir, capture_output=True, text=True, timeout=20)

        before = probe()
        if before.returncode == 0:
            problem("`hivegate healthcheck` succeeded with no server running")
        else:
            say(f"HEALTHCHECK {image.healthcheck} fails while nothing listens (exit {before.returncode}), as it should")

        log = (OUT / "runtime.log").open("w")
        process = subprocess.Popen(
            prefix + image.entrypoint + image.cmd, env=env, cwd=workdir, stdout=log, stderr=subprocess.STDOUT
        )
        started = time.monotonic()
        healthy = False
        while time.monotonic() - started < 60:
            if process.poll() is not None:
                break
            if probe().returncode == 0:
                healthy = True
                break
            time.sleep(0.2)
        if not healthy:
            log.flush()
            problem(f"the server did not become healthy; log: {(OUT / 'runtime.log').read_text()[-2000:]}")
            return
        say(f"`{' '.join(image.entrypoint + image.cmd)}` is healthy after {time.monotonic() - started:.1f}s "
            "(HEALTHCHECK exit 0)")

        status = Path(f"/proc/{process.pid}/status").read_text()
        real_uid = int(re.search(r"^Uid:\s+(\d+)", status, re.M)[1])
        if as_root and real_uid != uid:
            problem(f"the server runs as uid {real_uid}, not {uid}")
        database = image.env.get("HIVEGATE_DATABASE_URL", "")
        if database.startswith("sqlite:"):
            files = [p.name for p in workdir.iterdir()]
            if not any(name.endswith(".db") for name in files):
                problem(f"no SQLite database in the data directory {image.workdir}: {files}")
            else:
                say(f"SQLite database created in {image.workdir} by uid {workdir.stat().st_uid}: {sorted(files)}")

        # The MCP endpoint's Host check: the allowed host passes it (then 401 for want of a key), others 403.
        for host, want in (("hivegate.example.com", 401), ("evil.example.net", 403)):
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/validate/mcp",
                data=b'{"jsonrpc":"2.0","id":1,"method":"ping"}',
                headers={"Host": host, "Content-Type": "application/json"},
                method="POST",
            )
            try:
                got = urllib.request.urlopen(request, timeout=5).status
            except urllib.error.HTTPError as error:
                got = error.code
            if got != want:
                problem(f"POST /validate/mcp with Host {host} answered {got}, expected {want}")
        say("Host hivegate.example.com is allowed through HIVEGATE_MCP__ALLOWED_HOSTS; another host gets 403")

        # /metrics, and the Grafana dashboard in deploy/grafana queries only series it exports.
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        check_dashboard(set(re.findall(r"^# TYPE (hivegate_\w+) ", metrics, re.M)))

        # STOPSIGNAL (SIGTERM): a clean exit.
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            problem("the server did not stop within 30 s of SIGTERM")
            return
        if code != 0:
            problem(f"the server exited {code} after SIGTERM")
        else:
            say("SIGTERM: exit 0")
        process = None
    finally:
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()
        shutil.rmtree(root, ignore_errors=True)
    finish("runtime")


def check_dashboard(exported: set[str]) -> None:
    """docs/operations.md documents every family /metrics exports (`exported`: those with samples now), and
    deploy/grafana/hivegate.json queries only documented families."""
    if not exported:
        problem("GET /metrics lists no hivegate_* metric families")
        return
    guide = (ROOT / "docs" / "operations.md").read_text()
    documented = {
        name
        for line in guide.splitlines()
        if line.startswith("| `hivegate_")
        for name in re.findall(r"`(hivegate_\w+)", line.split("|")[1])
    }
    family = lambda name: re.sub(r"_(bucket|count|sum|total)$", "", name)  # noqa: E731
    documented = {family(name) for name in documented}
    if undocumented := exported - documented:
        problem(f"/metrics exports families docs/operations.md does not document: {sorted(undocumented)}")
    dashboard = json.loads((ROOT / "deploy" / "grafana" / "hivegate.json").read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    unknown = {name for expr in exprs for name in re.findall(r"hivegate_\w+", expr) if family(name) not in documented}
    if unknown:
        problem(f"the Grafana dashboard queries series that are not documented metrics: {sorted(unknown)}")
    else:
        say(
            f"/metrics: {len(exported)} families, all documented; Grafana dashboard: "
            f"{len(dashboard['panels'])} panels, {len(exprs)} queries, all over documented metrics"
        )


# --- docker compose and nginx ----------------------------------------------------------------------------


def duration_seconds(value: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    total = 0.0
    for number, unit in re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", str(value)):
        total += float(number) * units[unit]
    return total


def check_compose() -> None:
    image = Image()
    compose = os.environ.get("DOCKER_COMPOSE", "docker-compose")
    command = [compose, "-f", str(DEPLOY / "docker-compose.yml"), "--env-file", str(DEPLOY / ".env.example")]
    quiet = subprocess.run(command + ["config", "-q"], capture_output=True, text=True)
    if quiet.returncode != 0:
        problem(f"docker-compose config -q: {quiet.stderr.strip()}")
        finish("compose")
    say("docker-compose config -q accepts deploy/docker-compose.yml (with deploy/.env.example)")
    rendered = subprocess.run(command + ["config"], capture_output=True, text=True, check=True).stdout
    (OUT / "docker-compose.rendered.yml").write_text(rendered)
    services = yaml.safe_load(rendered)["services"]

    replicas = {name: s for name, s in services.items() if "build" in s}
    if len(replicas) < 2:
        problem(f"want at least two hivegate replicas built from the Dockerfile, found {sorted(replicas)}")
    postgres = [name for name, s in services.items() if str(s.get("image", "")).startswith("postgres")]
    for name, service in replicas.items():
        build = service["build"]
        context = Path(build["context"] if isinstance(build, dict) else build).resolve()
        if context != ROOT or (isinstance(build, dict) and build.get("dockerfile", "Dockerfile") != "Dockerfile"):
            problem(f"{name}: builds {build}, not the repository's Dockerfile")
        env = {k: str(v) for k, v in (service.get("environment") or {}).items()}
        url = env.get("HIVEGATE_DATABASE_URL", "")
        if not any(url.startswith(("postgres://", "postgresql://")) and f"@{p}:" in url for p in postgres):
            problem(f"{name}: HIVEGATE_DATABASE_URL does not name the PostgreSQL service {postgres}")
        for key in ("HIVEGATE_ADMIN_TOKEN", "HIVEGATE_MCP__ALLOWED_HOSTS"):
            if not env.get(key):
                problem(f"{name}: {key} is not set")
        # The container's environment: the image's, then the service's.
        full = {**image.env, **env, "HIVEGATE_CONFIG": str(ROOT / "config" / "hivegate.toml")}
        checked = config_check(f"compose service {name}", full)
        if checked:
            grace_ms = int(setting(checked["text"], "shutdown_grace_ms") or 0)
            stop = duration_seconds(service.get("stop_grace_period", "10s"))
            if stop * 1000 <= grace_ms:
                problem(f"{name}: stop_grace_period {stop}s does not exceed http.shutdown_grace_ms {grace_ms}")
            hosts = re.findall(r'"([^"]*)"', setting(checked["text"], "allowed_hosts", r"\[(.*?)\]") or "")
            say(f"{name}: hivegate accepts its configuration (allowed_hosts {hosts}, "
                f"shutdown grace {grace_ms} ms < stop_grace_period {stop:g} s)")

    # nginx: the configuration parses, balances over exactly the replicas, and passes SSE through.
    payload = crossplane.parse(str(DEPLOY / "nginx.conf"), strict=True, check_ctx=True, check_args=True)
    if payload["status"] != "ok":
        for error in payload["errors"]:
            problem(f"nginx.conf: {error['error']}")
        finish("compose")
    directives: dict[str, list[list[str]]] = {}
    upstream_servers: list[str] = []

    def walk(block: list[dict], parent: str | None) -> None:
        for d in block:
            directives.setdefault(d["directive"], []).append(d["args"])
            if d["directive"] == "server" and parent == "upstream":
                upstream_servers.append(d["args"][0])
            walk(d.get("block", []), d["directive"])

    walk(payload["config"][0]["parsed"], None)
    hosts = sorted(s.rsplit(":", 1)[0] for s in upstream_servers)
    if hosts != sorted(replicas):
        problem(f"nginx.conf upstream servers {hosts} are not the compose replicas {sorted(replicas)}")
    want = {
        "proxy_buffering": ["off"],
        "proxy_http_version": ["1.1"],
        "proxy_set_header": ["Connection", ""],
    }
    for directive, args in want.items():
        if args not in directives.get(directive, []):
            problem(f"nginx.conf lacks `{directive} {' '.join(args)}`")
    read_timeout = duration_seconds((directives.get("proxy_read_timeout") or [["60s"]])[0][0])
    if read_timeout < 600:
        problem(f"nginx.conf proxy_read_timeout {read_timeout:g}s is too short for event streams")
    if not directives.get("keepalive"):
        problem("nginx.conf keeps no upstream connections alive (`keepalive` in the upstream)")
    for sticky in ("ip_hash", "hash", "sticky"):
        if sticky in directives:
            problem(f"nginx.conf uses `{sticky}`; hivegate needs no sticky sessions")
    body = (directives.get("client_max_body_size") or [["1m"]])[0][0]
    body_bytes = int(body[:-1]) * {"k": 1024, "m": 1024**2, "g": 1024**3}[body[-1].lower()] if body[-1].isalpha() else int(body)
    for name, service in replicas.items():
        limit = int((service.get("environment") or {}).get("HIVEGATE_LIMITS__MAX_BODY_BYTES", 8 * 1024 * 1024))
        if body_bytes < limit:
            problem(f"nginx.conf client_max_body_size {body} is below {name}'s limits.max_body_bytes {limit}")
    say(f"nginx.conf parses; round robin over {hosts} with keepalive, no buffering, read timeout {read_timeout:g}s")
    finish("compose")


# --- Kubernetes ------------------------------------------------------------------------------------------


def check_k8s() -> None:
    image = Image()
    uid, gid = image.uid_gid()
    kubectl = VENV_BIN / "kubectl"
    variants = {"base": DEPLOY / "k8s" / "base"}
    for overlay in sorted((DEPLOY / "k8s" / "overlays").iterdir()):
        if (overlay / "kustomization.yaml").exists():
            variants[f"overlays/{overlay.name}"] = overlay
    for label, path in variants.items():
        rendered = subprocess.run([str(kubectl), "kustomize", str(path)], capture_output=True, text=True)
        if rendered.returncode != 0:
            problem(f"kubectl kustomize {label}: {rendered.stderr.strip()}")
            continue
        out = OUT / f"k8s-{label.replace('/', '-')}.yaml"
        out.write_text(rendered.stdout)
        objects = [o for o in yaml.safe_load_all(rendered.stdout) if o]
        kinds = sorted(f"{o['kind']}/{o['metadata']['name']}" for o in objects)
        say(f"{label}: kubectl kustomize renders {len(objects)} objects: {', '.join(kinds)}")

        validated = subprocess.run(
            [str(VENV_BIN / "kubernetes-validate"), "--strict", str(out)], capture_output=True, text=True
        )
        lines = [line for line in (validated.stdout + validated.stderr).splitlines() if line.strip()]
        passed = [line for line in lines if line.startswith("INFO") and " passed " in line]
        others = [line for line in lines if line not in passed]
        if validated.returncode != 0 or others or len(passed) != len(objects):
            problem(f"{label}: kubernetes-validate --strict: {len(passed)}/{len(objects)} passed; " + "; ".join(others))
        else:
            say(f"{label}: kubernetes-validate --strict accepts all {len(objects)} objects")

        check_objects(label, objects, uid)
    finish("Kubernetes")


def check_objects(label: str, objects: list[dict], uid: int) -> None:
    by_kind: dict[str, list[dict]] = {}
    for o in objects:
        by_kind.setdefault(o["kind"], []).append(o)
    required = ["Deployment", "Service", "ConfigMap", "HorizontalPodAutoscaler", "PodDisruptionBudget",
                "NetworkPolicy", "Job"] + (["Secret"] if label == "base" else [])
    for kind in required:
        if kind not in by_kind:
            problem(f"{label}: no {kind}")
    if not by_kind.get("Deployment"):
        return
    deployment = by_kind["Deployment"][0]
    secrets = {s["metadata"]["name"]: s for s in by_kind.get("Secret", [])}
    config_maps = {c["metadata"]["name"]: c for c in by_kind.get("ConfigMap", [])}
    template_labels = deployment["spec"]["template"]["metadata"]["labels"]

    def selects(selector: dict) -> bool:
        return all(template_labels.get(k) == v for k, v in selector.items())

    for service in by_kind.get("Service", []):
        if not selects(service["spec"]["selector"]):
            problem(f"{label}: Service {service['metadata']['name']} does not select the Deployment's pods")
    for pdb in by_kind.get("PodDisruptionBudget", []):
        if not selects(pdb["spec"]["selector"]["matchLabels"]):
            problem(f"{label}: the PodDisruptionBudget does not select the Deployment's pods")
    for hpa in by_kind.get("HorizontalPodAutoscaler", []):
        ref = hpa["spec"]["scaleTargetRef"]
        if ref["kind"] != "Deployment" or ref["name"] != deployment["metadata"]["name"]:
            problem(f"{label}: the HorizontalPodAutoscaler scales {ref}, not the Deployment")
        if not 1 <= hpa["spec"].get("minReplicas", 1) <= hpa["spec"]["maxReplicas"]:
            problem(f"{label}: HorizontalPodAutoscaler bounds are wrong")
        if hpa["spec"].get("minReplicas", 1) < 2:
            problem(f"{label}: fewer than two replicas at minimum")
        say(f"{label}: {hpa['spec']['minReplicas']}..{hpa['spec']['maxReplicas']} replicas")
    for policy in by_kind.get("NetworkPolicy", []):
        if not all(template_labels.get(k) == v for k, v in policy["spec"]["podSelector"]["matchLabels"].items()):
            problem(f"{label}: the NetworkPolicy does not select the Deployment's pods")

    for workload in by_kind.get("Deployment", []) + by_kind.get("Job", []):
        name = f"{workload['kind']}/{workload['metadata']['name']}"
        pod = workload["spec"]["template"]["spec"]
        pod_security = pod.get("securityContext", {})
        if not pod_security.get("runAsNonRoot") or pod_security.get("runAsUser") != uid:
            problem(f"{label}: {name} should run as non-root uid {uid}")
        if pod.get("automountServiceAccountToken") is not False:
            problem(f"{label}: {name} mounts a service account token it does not need")
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for container in pod["containers"]:
            security = container.get("securityContext", {})
            if not (security.get("readOnlyRootFilesystem") and security.get("allowPrivilegeEscalation") is False
                    and "ALL" in security.get("capabilities", {}).get("drop", [])):
                problem(f"{label}: {name}/{container['name']} needs readOnlyRootFilesystem, no privilege "
                        "escalation and all capabilities dropped")
            if "resources" not in container or "requests" not in container["resources"]:
                problem(f"{label}: {name}/{container['name']} has no resource requests")
            image_ref = container["image"]
            if image_ref.endswith(":latest") or ":" not in image_ref.rsplit("/", 1)[-1] and "@" not in image_ref:
                problem(f"{label}: {name} uses an unpinned image {image_ref}")
            checked = check_container_config(label, name, container, volumes, config_maps, secrets)
            if workload["kind"] == "Deployment" and checked:
                check_probes_and_grace(label, pod, container, checked)


def check_container_config(label, name, container, volumes, config_maps, secrets) -> dict[str, str] | None:
    """`hivegate config check` with the container's environment and its mounted configuration file."""
    image = Image()
    with tempfile.TemporaryDirectory(prefix="hivegate-k8s-config.") as tmp:
        env = dict(image.env)
        mounts = {}
        for mount in container.get("volumeMounts", []):
            volume = volumes.get(mount["name"], {})
            if "configMap" in volume:
                data = config_maps[volume["configMap"]["name"]]["data"]
                directory = Path(tmp) / mount["mountPath"].lstrip("/")
                directory.mkdir(parents=True, exist_ok=True)
                for file, content in data.items():
                    (directory / file).write_text(content)
                mounts[mount["mountPath"]] = directory
        for var in container.get("env", []):
            if "value" in var:
                env[var["name"]] = var["value"]
            elif "secretKeyRef" in var.get("valueFrom", {}):
                ref = var["valueFrom"]["secretKeyRef"]
                secret = secrets.get(ref["name"])
                value = (secret or {}).get("stringData", {}).get(ref["key"]) if secret else None
                if value is None and ref.get("optional"):
                    continue
                if value is None:
                    # A Secret made outside the repository: a stand-in of the right shape.
                    value = {"database-url": "postgres://hivegate:stand-in@postgres:5432/hivegate"}.get(
                        ref["key"], "stand-in-secret-value-0123456789")
                env[var["name"]] = value
        for path, directory in mounts.items():
            for key, value in list(env.items()):
                env[key] = value.replace(path, str(directory))
        checked = config_check(f"{label}: {name}", env)
        if checked:
            say(f"{label}: {name}: hivegate accepts its configuration (mounted file + env)")
        return checked


def check_probes_and_grace(label: str, pod: dict, container: dict, checked: dict[str, str]) -> None:
    text = checked["text"]
    port = int(setting(text, "listen", r'"?[^\s",]*:(\d+)') or 0)
    ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
    if port not in ports.values():
        problem(f"{label}: containerPort {list(ports.values())} is not the listen port {port}")

    def probe_path(kind: str) -> str | None:
        probe = container.get(kind)
        if not probe or "httpGet" not in probe:
            return None
        target = probe["httpGet"]["port"]
        if ports.get(target, target) != port:
            problem(f"{label}: {kind} probes port {target}, not {port}")
        return probe["httpGet"]["path"]

    if probe_path("readinessProbe") != "/readyz":
        problem(f"{label}: the readiness probe should be GET /readyz")
    if probe_path("livenessProbe") != "/healthz":
        problem(f"{label}: the liveness probe should be GET /healthz")
    grace_ms = int(setting(text, "shutdown_grace_ms") or 0)
    pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
    termination = pod.get("terminationGracePeriodSeconds", 30)
    if termination * 1000 <= pre_stop * 1000 + grace_ms:
        problem(f"{label}: terminationGracePeriodSeconds {termination} does not exceed preStop {pre_stop}s + "
                f"http.shutdown_grace_ms {grace_ms}")
    hosts = re.findall(r'"([^"]*)"', setting(text, "allowed_hosts", r"\[(.*?)\]") or "")
    if not hosts:
        problem(f"{label}: mcp.allowed_hosts is empty: clients reaching the Service by name would get 403")
    say(f"{label}: probes /readyz and /healthz on port {port}; terminationGracePeriodSeconds {termination} > "
        f"preStop {pre_stop}s + shutdown grace {grace_ms} ms; allowed_hosts {hosts}")


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    checks = {
        "dockerfile": check_dockerfile,
        "context": check_context,
        "runtime": check_runtime,
        "compose": check_compose,
        "k8s": check_k8s,
    }
    if len(sys.argv) != 2 or sys.argv[1] not in checks:
        raise SystemExit(f"usage: checks.py {'|'.join(checks)}")
    checks[sys.argv[1]]()
