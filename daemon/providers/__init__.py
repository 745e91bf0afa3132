"""Provider adapters, one module per wire API, loaded lazily so start-up stays fast."""
