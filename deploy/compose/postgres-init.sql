-- Runs once, when the PostgreSQL volume is new: a read-only user for Grafana. fp8scoped (user
-- fp8scope, the owner) creates schema fp8scope and its tables at its first start; the default
-- privileges below reach them.
CREATE ROLE grafana_reader LOGIN;
CREATE SCHEMA IF NOT EXISTS fp8scope AUTHORIZATION fp8scope;
GRANT USAGE ON SCHEMA fp8scope TO grafana_reader;
ALTER DEFAULT PRIVILEGES FOR ROLE fp8scope IN SCHEMA fp8scope GRANT SELECT ON TABLES TO grafana_reader;
