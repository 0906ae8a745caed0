"""The admin's policy: allowed host paths and images, and the operator's settings."""
