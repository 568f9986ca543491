"""The metrics plane: what Prometheus or the scale-out scrapers scrape, and how."""
