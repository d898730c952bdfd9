"""Rule rewards (verifiable, not learned): the router's path reward and the generator's SQL rewards."""
