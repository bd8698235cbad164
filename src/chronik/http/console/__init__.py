"""The broker's web console (docs/console.md): a page and a JSON API under /console/ on
the broker's HTTP listener, acting as the logged-in principal over the Kafka protocol."""
