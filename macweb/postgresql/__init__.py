"""MAC's PostgreSQL backend: Django's, with COMMIT and ROLLBACK under the statement deadline."""
