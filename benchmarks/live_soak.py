"""Soak a live run: loop a clip into a local RTSP server, anonymize it, report.

    python benchmarks/live_soak.py --seconds 600 --segment-time 60 [--max-latency 1.0]

Starts rtsp-server-perl on free 127.0.0.1 ports (install: .ci/setup-rtsp.sh),
publishes ../shared/media/short_hamilton_clip.mp4 (640x360, 29.97 fps) in a
loop with each frame's send time stamped into its top-left corner, runs
``run_live`` into rotating segments, and prints per-interval stats, RSS, and
end-to-end latency (publisher send -> anonymized frame handed to the encoder,
read back from the stamp). Everything stays on loopback; all waits are bounded.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CLIP = ROOT.parent / "shared" / "media" / "short_hamilton_clip.mp4"

from devtools.publish import now_ms, read_stamp  # noqa: E402
from devtools.rtsp import SERVER, Publisher, RtspServer, rss_kb  # noqa: E402

from streamdeid.config import PipelineConfig  # noqa: E402
from streamdeid.live import LiveConfig, run_live  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--segment-time", type=float, default=30.0)
    ap.add_argument("--max-latency", type=float, default=1.0)
    ap.add_argument("--anonymize", default="blur")
    ap.add_argument("--out", default=None, help="folder for segments (default: a temp dir, deleted)")
    args = ap.parse_args()
    if SERVER is None or not CLIP.exists():
        print("needs rtsp-server-perl and ../shared/media", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    tmp = tempfile.TemporaryDirectory()
    folder = Path(args.out or tmp.name)
    server = RtspServer(folder)
    server.start()
    pub = Publisher(server.publish_url(), CLIP, seconds=args.seconds + 20, stamp=True)
    e2e: list[float] = []
    rss: list[int] = []
    last = [0.0]

    def observe(result, _pasted) -> None:
        e2e.append(((now_ms() - read_stamp(result.frame.image)) % (1 << 32)) / 1000.0)
        now = time.monotonic()
        if now - last[0] >= 5:
            last[0] = now
            rss.append(rss_kb())

    try:
        time.sleep(2.0)
        config = PipelineConfig(progress=False)
        config.anonymize.method = args.anonymize
        live = LiveConfig(transport="udp", segment_time=args.segment_time, max_latency=args.max_latency,
                          stop_after=args.seconds, stats_interval=10)
        summary = run_live(server.url(), str(folder / "soak.mp4"), config, live, observers=[observe])
    finally:
        pub.end()
        server.kill()
    e2e = sorted(v for v in e2e if v < 60)  # a stamp damaged by a face paste would read as garbage
    report = {
        "frames_in": summary.frames_in, "frames_out": summary.frames, "dropped": summary.dropped,
        "fps_out": round(summary.fps, 2), "segments": len(summary.segments),
        "latency_internal_mean": round(summary.latency_mean, 3), "latency_internal_p95": round(summary.latency_p95, 3),
        "latency_e2e_mean": round(sum(e2e) / len(e2e), 3) if e2e else None,
        "latency_e2e_p50": round(e2e[len(e2e) // 2], 3) if e2e else None,
        "latency_e2e_p95": round(e2e[int(0.95 * len(e2e))], 3) if e2e else None,
        "rss_mb_first": round(rss[0] / 1024) if rss else None, "rss_mb_last": round(rss[-1] / 1024) if rss else None,
        "stage_ms_per_frame": {k: round(v / max(1, summary.frames), 2) for k, v in summary.times.ms.items()},
    }
    print(json.dumps(report, indent=1))
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
