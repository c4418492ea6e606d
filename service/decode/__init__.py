"""Decoders: pure functions from one Kafka message's bytes to records, or a `DecodeError` with a reason.

Every decoder takes `(payload, ref_ts, host=None)`: `ref_ts` is the message's own timestamp (Kafka
record time or file position time), used only where a format leaves time incomplete (RFC3164 has no
year, a scrape may carry no timestamps); `host` is what the transport names (Kafka key or `host`
header), used only where the payload names no host (a bare exposition, dmesg, /dev/kmsg).
"""

from prexid.service.decode.types import DecodeError, KernelLine, LogDecoder, MetricDecoder, RawSample, Samples

__all__ = ["DecodeError", "KernelLine", "LogDecoder", "MetricDecoder", "RawSample", "Samples"]
