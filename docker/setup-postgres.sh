#!/bin/sh
# Creates Temporal's two PostgreSQL databases and brings their schemas up to date (admin-tools image).
set -eu
nc -z -w 10 postgresql 5432
for db in temporal temporal_visibility; do
  dir=temporal
  [ "$db" = temporal_visibility ] && dir=visibility
  temporal-sql-tool --plugin postgres12 --ep postgresql -u temporal -p 5432 --db "$db" create || true
  temporal-sql-tool --plugin postgres12 --ep postgresql -u temporal -p 5432 --db "$db" setup-schema -v 0.0
  temporal-sql-tool --plugin postgres12 --ep postgresql -u temporal -p 5432 --db "$db" \
    update-schema -d "/etc/temporal/schema/postgresql/v12/$dir/versioned"
done
