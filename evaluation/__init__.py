"""End-to-end evaluation: A/B comparison of routing and generation methods, and the Spider dev benchmark."""
