"""Connection options every prexid Kafka client shares: bootstrap servers, SASL (SCRAM) and TLS.

One function, so the consumer, the producers, the admin client and the state store can never disagree
about how to authenticate. Passwords leave their `SecretStr` only here, straight into aiokafka.
"""

from __future__ import annotations

from typing import Any

from aiokafka.helpers import create_ssl_context

from prexid.service.app.settings import KafkaSecurity, Settings


def client_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for AIOKafkaConsumer / AIOKafkaProducer / AIOKafkaAdminClient."""
    sec = settings.kafka_security
    opts: dict[str, Any] = {"bootstrap_servers": settings.kafka_bootstrap, "security_protocol": sec.protocol}
    if sec.protocol.startswith("SASL"):
        if not sec.sasl_username or sec.sasl_password is None:
            raise ValueError(f"{sec.protocol} needs kafka_security.sasl_username and sasl_password")
        opts |= {
            "sasl_mechanism": sec.sasl_mechanism,
            "sasl_plain_username": sec.sasl_username,
            "sasl_plain_password": sec.sasl_password.get_secret_value(),
        }
    if sec.protocol in ("SSL", "SASL_SSL"):
        opts["ssl_context"] = _ssl_context(sec)
    return opts


def _ssl_context(sec: KafkaSecurity) -> Any:
    return create_ssl_context(
        cafile=str(sec.ssl_cafile) if sec.ssl_cafile else None,
        certfile=str(sec.ssl_certfile) if sec.ssl_certfile else None,
        keyfile=str(sec.ssl_keyfile) if sec.ssl_keyfile else None,
        password=sec.ssl_key_password.get_secret_value() if sec.ssl_key_password else None,
    )
