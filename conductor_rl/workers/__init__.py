"""The workers: one async interface over every provider
(`providers/`), and what guards each call: rate limits (`limits`), retries
(`retry`), prices (`costs`), the cost ledger and budget (`ledger`), the
guarded call that chains them (`guarded`), and a response cache
(`response_cache`)."""
