"""Alert webhooks: the outbox relay, HTTP delivery with retries, Standard Webhooks signing."""
