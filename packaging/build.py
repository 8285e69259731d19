"""Build the double-clickable Parley app for this platform (``make package`` runs this).

    python packaging/build.py [--clean] [--skip-build] [--installer] [--self-test]
                              [--executable PROGRAM] [--report FILE] [--json]

Runs PyInstaller on packaging/parley.spec from the repository root and writes a
one-folder app: dist/Parley/ (Linux, Windows) or dist/Parley.app (macOS, with the same
folder beside it). Prints the build time and the folder's size. ``--installer`` then wraps
it for download: on macOS the .app in dist/Parley-<version>.dmg (packaging/macos/make_dmg.sh,
which checks the signature and the microphone usage string first), on Windows
dist/Parley-<version>-setup.exe (Inno Setup 6, packaging/windows/parley.iss). ``--self-test``
runs the app's ``--self-test`` in a clean environment (no venv, no PYTHONPATH, hub
offline), the way a user's machine would start it, and prints its timings;
``--executable`` points it at another copy (an installed one, or the .app inside the
mounted DMG), ``--skip-build`` tests what is there without building. ``--report`` writes
the figures and the whole self-test JSON to a file (CI uploads it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "packaging" / "parley.spec"
DIST = ROOT / "dist"
WORK = ROOT / "build" / "pyinstaller"
SYSTEM = platform.system()


def app_folder(dist: Path = DIST) -> Path:
    """What the build produces: the .app on macOS, else the one-folder app."""
    return dist / "Parley.app" if SYSTEM == "Darwin" else dist / "Parley"


def executable(dist: Path = DIST) -> Path:
    """The program inside the built app that accepts ``--self-test`` and prints to stdout."""
    if SYSTEM == "Darwin":
        return dist / "Parley.app" / "Contents" / "MacOS" / "Parley"
    if SYSTEM == "Windows":
        return dist / "Parley" / "Parley-console.exe"  # the windowed Parley.exe has no stdout
    return dist / "Parley" / "Parley"


def project_version() -> str:
    """The version in pyproject.toml: the installers' file names carry it."""
    with open(ROOT / "pyproject.toml", "rb") as fh:
        return tomllib.load(fh)["project"]["version"]


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """A bare environment like a double click gets: HOME and a system PATH, hub offline.

    Nothing points into the build's virtualenv, so the app must carry all it needs.
    Windows needs a few system variables to start any program at all.
    """
    env = {"HOME": str(Path.home()), "HF_HUB_OFFLINE": "1", "QT_QPA_PLATFORM": "offscreen"}
    if SYSTEM == "Windows":
        for name in ("SYSTEMROOT", "SYSTEMDRIVE", "WINDIR", "TEMP", "TMP", "USERPROFILE",
                     "LOCALAPPDATA", "APPDATA"):
            if name in os.environ:
                env[name] = os.environ[name]
        root = os.environ.get("SYSTEMROOT", r"C:\Windows")
        env["PATH"] = rf"{root}\System32;{root};{root}\System32\Wbem"  # no venv, no Python
    else:
        env["PATH"] = "/usr/bin:/bin"
    env.update(extra or {})
    return env


def folder_size(path: Path) -> tuple[int, int]:
    """Bytes and files under ``path``, links not followed (what the user downloads)."""
    total = files = 0
    for root, _dirs, names in os.walk(path):
        for name in names:
            full = Path(root) / name
            if not full.is_symlink():
                total += full.stat().st_size
                files += 1
    return total, files


def human(n: float) -> str:
    """Bytes for people: 1.2 GiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} GiB"


def prebuilt_llm() -> list[Path]:
    """The bundled SmolLM2 converted now (or found converted in the cache) for the app to
    carry, so its first start converts nothing: the int4 ONNX folder the default CPU
    backend (onnx-genai) loads. Empty without the GGUF.

    The safetensors copy (what transformers loads, ~540 MB) stays out: an app told to use
    ``llm.backend = transformers`` converts it on its first start instead.
    """
    sys.path.insert(0, str(ROOT))
    from engine.backends.llm.onnx_convert import converted_folder
    from engine.backends.llm.transformers_lm import bundled_model

    gguf = bundled_model()
    if gguf is None:
        return []
    started = time.perf_counter()
    folder = converted_folder(gguf, progress=lambda fraction, text: print(f"build: {text}",
                                                                         file=sys.stderr))
    print(f"build: the app carries {folder.name} (converted in "
          f"{time.perf_counter() - started:.1f} s or found)", file=sys.stderr, flush=True)
    return [folder]


def build(clean: bool = False) -> dict:
    """Run PyInstaller; return the figures. SystemExit with its output tail if it fails."""
    icons = ROOT / "resources" / "icons"
    needed = ["parley.ico", "parley.icns", "parley-256.png"]
    if not all((icons / n).is_file() for n in needed):
        subprocess.run([sys.executable, str(ROOT / "packaging" / "make_icons.py")], check=True)
    cmd = [sys.executable, "-m", "PyInstaller", "--noconfirm", "--log-level", "WARN",
           "--distpath", str(DIST), "--workpath", str(WORK), str(SPEC)]
    if clean:
        cmd.insert(3, "--clean")
    print("build: " + " ".join(cmd), file=sys.stderr, flush=True)
    env = dict(os.environ)
    prebuilt = prebuilt_llm()
    if prebuilt:
        env["PARLEY_PREBUILT_LLM"] = os.pathsep.join(str(folder) for folder in prebuilt)
    if SYSTEM == "Darwin":
        # An arm64 Mac runs no unsigned code: a bundle PyInstaller failed to sign (ad hoc, or
        # with PARLEY_CODESIGN_IDENTITY) must fail the build, not only log a warning.
        env.setdefault("PYINSTALLER_STRICT_BUNDLE_CODESIGN_ERROR", "1")
        env.setdefault("PYINSTALLER_VERIFY_BUNDLE_SIGNATURE", "1")
    started = time.perf_counter()
    result = subprocess.run(cmd, cwd=ROOT, env=env)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"build: PyInstaller failed (exit {result.returncode}) after {seconds:.0f} s")
    folder = app_folder()
    size, files = folder_size(folder)
    return {"platform": f"{SYSTEM} {platform.machine()}", "app": str(folder.relative_to(ROOT)),
            "executable": str(executable().relative_to(ROOT)), "build_s": round(seconds, 1),
            "size_bytes": size, "size": human(size), "files": files}


def run_self_test(timeout: float = 900, env_extra: dict[str, str] | None = None,
                  exe: Path | None = None) -> dict:
    """Start the app with ``--self-test`` in a clean environment; its JSON plus timing.

    ``exe``: the program to start (default: the one just built, ``executable()``).
    """
    exe = exe or executable()
    if not exe.is_file():
        raise SystemExit(f"build: {exe} does not exist; build first (or pass the right --executable)")
    started = time.perf_counter()
    proc = subprocess.run([str(exe), "--self-test"], env=clean_env(env_extra), cwd=exe.parent,
                          capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - started
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        report = {"ok": False, "error": "no JSON on stdout", "stdout": proc.stdout[-2000:]}
    report["exit_status"] = proc.returncode
    report["wall_s"] = round(wall, 2)
    report["stderr_tail"] = proc.stderr[-3000:]
    return report


def make_dmg() -> Path:
    """macOS: verify the signature and Info.plist, wrap the .app in a .dmg, notarize
    (make_dmg.sh); the .dmg's path."""
    if SYSTEM != "Darwin":
        raise SystemExit("build: a .dmg is made on macOS only")
    subprocess.run(["bash", str(ROOT / "packaging" / "macos" / "make_dmg.sh")], cwd=ROOT, check=True)
    return DIST / f"Parley-{project_version()}.dmg"


def inno_setup_compiler() -> Path:
    """ISCC.exe of Inno Setup 6: on PATH, or where its installer puts it."""
    found = shutil.which("iscc")
    if found:
        return Path(found)
    for variable in ("ProgramFiles(x86)", "ProgramFiles"):
        base = os.environ.get(variable)
        if base and (Path(base) / "Inno Setup 6" / "ISCC.exe").is_file():
            return Path(base) / "Inno Setup 6" / "ISCC.exe"
    raise SystemExit("build: Inno Setup 6 (ISCC.exe) is neither on PATH nor in Program Files; "
                     "install it (choco install innosetup, or the installer from jrsoftware.org)")


def make_windows_installer() -> Path:
    """Windows: dist/Parley-<version>-setup.exe from dist/Parley (packaging/windows/parley.iss)."""
    if SYSTEM != "Windows":
        raise SystemExit("build: the Inno Setup installer is made on Windows only")
    if not (DIST / "Parley" / "Parley.exe").is_file():
        raise SystemExit(f"build: {DIST / 'Parley' / 'Parley.exe'} does not exist; build first")
    version = project_version()
    subprocess.run([str(inno_setup_compiler()), f"/DVersion={version}",
                    str(ROOT / "packaging" / "windows" / "parley.iss")], cwd=ROOT, check=True)
    return DIST / f"Parley-{version}-setup.exe"


def make_installer() -> Path:
    """The platform's download: a .dmg on macOS, a setup .exe on Windows."""
    if SYSTEM == "Darwin":
        return make_dmg()
    if SYSTEM == "Windows":
        return make_windows_installer()
    raise SystemExit(f"build: --installer makes a .dmg (macOS) or a setup .exe (Windows), not on "
                     f"{SYSTEM}; on Linux packaging/linux/install.sh installs dist/Parley")


def main(argv: list[str] | None = None) -> int:
    """Build, report, and optionally self-test the built app."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clean", action="store_true", help="drop PyInstaller's cache first")
    parser.add_argument("--skip-build", action="store_true",
                        help="do not build: use the app already in dist/ (or --executable)")
    parser.add_argument("--self-test", action="store_true",
                        help="run the app's --self-test in a clean environment")
    parser.add_argument("--executable", type=Path, metavar="PROGRAM",
                        help="the program --self-test starts (default: the one in dist/)")
    parser.add_argument("--installer", action="store_true",
                        help="also make the download: dist/Parley-<version>.dmg (macOS) or "
                             "dist/Parley-<version>-setup.exe (Windows)")
    parser.add_argument("--dmg", action="store_true", help="macOS: the same as --installer")
    parser.add_argument("--report", type=Path, metavar="FILE",
                        help="write the figures and the self-test's JSON to FILE")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if args.executable and not args.self_test:
        parser.error("--executable names the program --self-test starts: add --self-test")
    if args.skip_build and not (args.self_test or args.installer or args.dmg):
        parser.error("--skip-build leaves nothing to do without --self-test or --installer")
    if args.skip_build:
        figures: dict = {"platform": f"{SYSTEM} {platform.machine()}", "built": False}
    else:
        figures = build(args.clean)
        print(f"build: {figures['app']} built in {figures['build_s']:.1f} s; "
              f"{figures['size']} in {figures['files']} files", flush=True)
    if args.installer or args.dmg:
        installer = make_dmg() if args.dmg else make_installer()
        figures["installer"] = str(installer.relative_to(ROOT))
        figures["installer_size"] = human(installer.stat().st_size)
        print(f"build: wrote {figures['installer']} ({figures['installer_size']})", flush=True)
    status = 0
    if args.self_test:
        report = run_self_test(exe=args.executable.resolve() if args.executable else None)
        figures["self_test_executable"] = str(args.executable or executable())
        figures["self_test"] = {k: report.get(k) for k in (
            "ok", "exit_status", "error", "transcript", "reply", "launch_to_ready_s",
            "launch_to_first_reply_audio_s", "total_s", "wall_s")}
        figures["self_test_report"] = report
        if report.get("ok") and report["exit_status"] == 0:
            print(f"build: self-test passed: heard {report['transcript']!r}, replied "
                  f"{report['reply']!r}; first reply audio {report['launch_to_first_reply_audio_s']} s "
                  f"after launch, {report['total_s']} s in all", flush=True)
        else:
            print(f"build: self-test FAILED (exit {report['exit_status']}): {report.get('error')}\n"
                  f"{report['stderr_tail']}", file=sys.stderr)
            status = 1
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(json.dumps(figures, indent=2, ensure_ascii=False) + "\n",
                               encoding="utf-8")
    if args.json:
        print(json.dumps({k: v for k, v in figures.items() if k != "self_test_report"}, indent=2))
    return status


if __name__ == "__main__":
    sys.exit(main())
