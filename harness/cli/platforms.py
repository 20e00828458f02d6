"""``harness platforms``: what this machine has, platform by platform, and whether the runner
profile fits it.

For each platform (built-in, then third-party ones from the ``harness.platforms`` entry point
group): available or not and why; the real identity of an available one (architecture, FP8
flavour, capabilities, devices, driver and runtime); the simulated identity an unavailable one
presents when a run asks for it. Then the runner profile's platform and ``device_count``, and
whether this machine matches them. Exit 0, or 2 for a usage error, a bad profile, or a profile
whose ``device_count`` this machine cannot serve.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from harness import platforms
from harness.platforms.devices import DeviceCount, check_device_count, count_here
from harness.platforms.policy import describe as describe_policy
from harness.platforms.policy import resolve as resolve_policy
from harness.platforms.profile import Profile, resolve_profile

EPILOG = """\
examples:
  harness platforms                            # every platform: available here, or simulated
  harness platforms --runner mi300x            # ... and whether runners/mi300x.toml fits here
  harness platforms --runner runners/h100.toml --json
"""


def add_parser(sub: Any) -> None:
    cmd = sub.add_parser(
        "platforms",
        help="what this machine has per platform, and whether a runner profile fits it",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cmd.add_argument(
        "--runner",
        metavar="PROFILE",
        help="runner profile: a name in runners/ or a path (default: the built-in CPU defaults)",
    )
    cmd.add_argument("--json", action="store_true", help="print one JSON document instead")
    cmd.set_defaults(func=main)


def _identity_line(ident: platforms.Identity) -> str:
    caps = ", ".join(ident.capabilities) or "none"
    devices = ", ".join(ident.device_names) or "none"
    parts = [
        f"arch {ident.arch or '-'}",
        f"fp8 {ident.fp8 or 'none'}",
        f"capabilities {caps}",
        f"{ident.device_count} device(s): {devices}",
    ]
    if not ident.simulated:
        parts += [f"driver {ident.driver or '-'}", f"runtime {ident.runtime or '-'}"]
    return "; ".join(parts)


def _profile_report(profile: Profile) -> dict[str, Any]:
    """The profile's platform and device_count against this machine."""
    plat = profile.platform
    found: DeviceCount = count_here(plat)
    wanted = profile.device_count
    if wanted < 1:
        ok, message = True, "device_count = 0: no device is pinned"
    else:
        ok, message = check_device_count(profile.source, plat, wanted, found)
    return {
        "name": profile.name,
        "source": profile.source or None,
        "platform": plat,
        "arch": getattr(profile, "arch", None),
        "platform_available": found.available,
        "platform_reason": found.reason,
        "device_count": wanted,
        "devices_here": found.count,
        "matches": ok,
        "device_check": message,
        "policy": _policy(profile),
        "policy_lines": describe_policy(profile),
    }


def _policy(profile: Profile) -> Any:
    """The resolved platform policy of ``profile`` on its platform: setting -> value, rule
    and source (the same record report.json keeps with each result)."""
    return resolve_policy(profile.platform, profile).to_json()


def collect(profile: Profile) -> dict[str, Any]:
    return {
        "platforms": [
            {
                "name": s.name,
                "available": s.available,
                "reason": s.reason,
                "third_party": s.third_party,
                "identity": s.identity.to_json(),
            }
            for s in platforms.statuses()
        ],
        "third_party_errors": platforms.third_party_errors(),
        "profile": _profile_report(profile),
    }


def render(data: dict[str, Any]) -> str:
    lines = ["platforms on this machine:"]
    width = max(len(p["name"]) for p in data["platforms"])
    for p in data["platforms"]:
        ident = platforms.Identity.from_json(p["identity"])
        state = "available" if p["available"] else "simulated"
        origin = " (third-party)" if p["third_party"] else ""
        lines.append(f"  {p['name']:<{width}}  {state:<9}  {p['reason']}{origin}")
        label = "identity" if p["available"] else "presents"
        lines.append(f"  {'':<{width}}  {label:<9}  {_identity_line(ident)}")
    errors = data["third_party_errors"]
    loaded = [p["name"] for p in data["platforms"] if p["third_party"]]
    lines.append(
        f"third-party platforms ({platforms.ENTRY_POINT_GROUP} entry points): "
        f"{', '.join(loaded) or 'none'} loaded, {len(errors)} left out"
    )
    lines += [f"  error: {e}" for e in errors]
    prof = data["profile"]
    src = prof["source"] or "built-in defaults"
    lines.append(f"runner profile: {prof['name']} ({src})")
    here = "available here" if prof["platform_available"] else "simulated here"
    lines.append(f"  platform: {prof['platform']} ({here}: {prof['platform_reason']})")
    if prof["arch"]:
        lines.append(f"  arch: {prof['arch']}")
    verdict = (
        "DOES NOT MATCH"
        if not prof["matches"]
        else "matches"
        if prof["platform_available"] or prof["device_count"] < 1
        else "not checked"
    )
    lines.append(f"  device_count: {prof['device_count']} ({verdict}: {prof['device_check']})")
    lines += [f"  {line}" for line in prof["policy_lines"]]
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    profile = resolve_profile(args.runner, Path("runners"))
    data = collect(profile)
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        print(render(data))
    if not data["profile"]["matches"]:
        print(f"error: {data['profile']['device_check']}", file=sys.stderr)
        return 2
    return 0
