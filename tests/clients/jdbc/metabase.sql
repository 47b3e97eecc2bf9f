-- Metabase syncing a Materialize database through the Materialize driver (a child of Metabase's postgres driver) over pgjdbc
-- connect-time statements, then describe-database, describe-fields and describe-fks for
-- schema sales, in the order Metabase sends them. The startup options name a cluster, as the
-- driver's connection spec does. Metabase builds its own queries with HoneySQL 2 ({:dialect
-- :ansi}: quoted identifiers, values as parameters); they are rendered here by hand from
-- the forms in the cited files (parenthesisation may differ from HoneySQL's, not the
-- meaning). Parameters: Clojure longs bind as int8, strings as varchar (pgjdbc's setObject).
-- The order of the connection pool's own statements follows a capture of Metabase v0.55.1
-- (datafusion-contrib/datafusion-postgres@2ac70e6de3e68ad3a571f9771e91ad1e5ea67c7e datafusion-postgres/tests/metabase.rs); there, against a server that took SET SESSION CHARACTERISTICS, the pool later
-- restored the isolation level with another; a refused one is not restored, so it is not
-- replayed. The application name's versions are illustrative. The last two statements
-- are what Metabase's plain PostgreSQL driver sends instead, for a user who picks it.
-- startup: {"user": "materialize", "database": "materialize", "client_encoding": "UTF8", "DateStyle": "ISO", "TimeZone": "UTC", "options": "--cluster=quickstart"}
-- startup source: pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/core/v3/ConnectionFactoryImpl.java getParametersForStartup (TimeZone is the JVM's zone: UTC here)

-- query: pgjdbc connect: runInitialQueries
-- source: pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/core/v3/ConnectionFactoryImpl.java runInitialQueries: a server below 12 (mzflow reports 9.5.0) gets extra_float_digits = 3; application_name is sent here because assumeMinServerVersion is unset; one simple-protocol Query
-- protocol: simple
SET extra_float_digits = 3;SET application_name = 'Metabase Materialize driver v1.3.0 Metabase v0.50.0 [f8f63fdf-d8f8-4573-86ea-4fe4a9548041]';

-- query: connection pool: getTransactionIsolation()
-- source: datafusion-contrib/datafusion-postgres@2ac70e6de3e68ad3a571f9771e91ad1e5ea67c7e datafusion-postgres/tests/metabase.rs; pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/jdbc/PgConnection.java getTransactionIsolation
-- protocol: extended
SHOW TRANSACTION ISOLATION LEVEL;

-- query: set-best-transaction-level!: READ UNCOMMITTED
-- source: metabase/metabase@0041072d8fccaf81c6fbc2982a78bd347f6acafd src/metabase/driver/sql_jdbc/execute.clj set-best-transaction-level!; pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/jdbc/PgConnection.java setTransactionIsolation
-- protocol: extended
-- tolerate: 0A000 Metabase's set-best-transaction-level! catches any Throwable from setTransactionIsolation and goes on (Materialize refuses SET TRANSACTION too)
SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ UNCOMMITTED;

-- query: syncable schemas: getSchemas()
-- source: datafusion-contrib/datafusion-postgres@2ac70e6de3e68ad3a571f9771e91ad1e5ea67c7e datafusion-postgres/tests/metabase.rs; pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/jdbc/PgDatabaseMetaData.java getSchemas
-- protocol: extended
SELECT nspname AS "TABLE_SCHEM", current_database() AS "TABLE_CATALOG" FROM pg_catalog.pg_namespace  WHERE nspname <> 'pg_toast' AND (nspname !~ '^pg_temp_'  OR nspname = (pg_catalog.current_schemas(true))[1]) AND (nspname !~ '^pg_toast_temp_'  OR nspname = replace((pg_catalog.current_schemas(true))[1], 'pg_temp_', 'pg_toast_temp_'))  ORDER BY "TABLE_SCHEM";

-- query: describe-database: the Materialize driver's get-tables-sql
-- source: MaterializeInc/metabase-materialize-driver@09ddaaed1c70e68de7836f393cc64966b9aa755a src/metabase/driver/materialize.clj get-tables-sql
-- protocol: extended
-- params: [["int8", 0], ["varchar", "^pg_"], ["varchar", "^mz_"], ["varchar", "information_schema"]]
SELECT "n"."nspname" AS "schema", "c"."relname" AS "name", CASE "c"."relkind" WHEN 'r' THEN 'TABLE' WHEN 'p' THEN 'PARTITIONED TABLE' WHEN 'v' THEN 'VIEW' WHEN 'f' THEN 'FOREIGN TABLE' WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE NULL END AS "type", "d"."description" AS "description" FROM "pg_catalog"."pg_class" AS "c" INNER JOIN "pg_catalog"."pg_namespace" AS "n" ON "c"."relnamespace" = "n"."oid" LEFT JOIN "pg_catalog"."pg_description" AS "d" ON ("c"."oid" = "d"."objoid") AND ("d"."objsubid" = $1) AND ("d"."classoid" = 'pg_class'::regclass) WHERE ("c"."relnamespace" = "n"."oid") AND (("n"."nspname" !~ $2) AND ("n"."nspname" !~ $3) AND ("n"."nspname" <> $4)) AND c.relkind in ('r', 'p', 'v', 'f', 'm') ORDER BY "type" ASC, "schema" ASC, "name" ASC;

-- query: db-default-timezone
-- source: metabase/metabase@008fd6675457cdd62da2265628bed3b725a607ea src/metabase/driver/postgres.clj db-default-timezone (the statement's own ';' included)
-- protocol: extended
show timezone;;

-- query: enum types
-- source: metabase/metabase@008fd6675457cdd62da2265628bed3b725a607ea src/metabase/driver/postgres.clj enum-types
-- protocol: extended
SELECT nspname, typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE t.oid IN (SELECT DISTINCT enumtypid FROM pg_enum e);

-- query: describe-fields (schema sales)
-- source: metabase/metabase@008fd6675457cdd62da2265628bed3b725a607ea src/metabase/driver/postgres.clj describe-fields-sql
-- protocol: extended
-- params: [["varchar", "sales"], ["varchar", "sales"]]
SELECT "c"."column_name" AS "name", CASE WHEN "c"."udt_schema" IN ('public', 'pg_catalog') THEN FORMAT('%s', "c"."udt_name") ELSE FORMAT('"%s"."%s"', "c"."udt_schema", "c"."udt_name") END AS "database-type", "c"."ordinal_position" - 1 AS "database-position", "c"."table_schema" AS "table-schema", "c"."table_name" AS "table-name", "pk"."column_name" IS NOT NULL AS "pk?", COL_DESCRIPTION(CAST(CAST(FORMAT('%I.%I', CAST("c"."table_schema" AS TEXT), CAST("c"."table_name" AS TEXT)) AS REGCLASS) AS OID), "c"."ordinal_position") AS "field-comment", (("column_default" IS NULL) OR (LOWER("column_default") = 'null')) AND ("is_nullable" = 'NO') AND NOT ((("column_default" IS NOT NULL) AND ("column_default" LIKE '%nextval(%')) OR ("is_identity" <> 'NO')) AS "database-required", (("column_default" IS NOT NULL) AND ("column_default" LIKE '%nextval(%')) OR ("is_identity" <> 'NO') AS "database-is-auto-increment" FROM "information_schema"."columns" AS "c" LEFT JOIN (SELECT "tc"."table_schema", "tc"."table_name", "kc"."column_name" FROM "information_schema"."table_constraints" AS "tc" INNER JOIN "information_schema"."key_column_usage" AS "kc" ON ("tc"."constraint_name" = "kc"."constraint_name") AND ("tc"."table_schema" = "kc"."table_schema") AND ("tc"."table_name" = "kc"."table_name") WHERE "tc"."constraint_type" = 'PRIMARY KEY') AS "pk" ON ("c"."table_schema" = "pk"."table_schema") AND ("c"."table_name" = "pk"."table_name") AND ("c"."column_name" = "pk"."column_name") WHERE c.table_schema !~ '^information_schema|catalog_history|pg_' AND ("c"."table_schema" IN ($1)) UNION ALL SELECT "pa"."attname" AS "name", CASE WHEN "ptn"."nspname" IN ('public', 'pg_catalog') THEN FORMAT('%s', "pt"."typname") ELSE FORMAT('"%s"."%s"', "ptn"."nspname", "pt"."typname") END AS "database-type", "pa"."attnum" - 1 AS "database-position", "pn"."nspname" AS "table-schema", "pc"."relname" AS "table-name", FALSE AS "pk?", NULL AS "field-comment", FALSE AS "database-required", FALSE AS "database-is-auto-increment" FROM "pg_catalog"."pg_class" AS "pc" INNER JOIN "pg_catalog"."pg_namespace" AS "pn" ON "pn"."oid" = "pc"."relnamespace" INNER JOIN "pg_catalog"."pg_attribute" AS "pa" ON "pa"."attrelid" = "pc"."oid" INNER JOIN "pg_catalog"."pg_type" AS "pt" ON "pt"."oid" = "pa"."atttypid" INNER JOIN "pg_catalog"."pg_namespace" AS "ptn" ON "ptn"."oid" = "pt"."typnamespace" WHERE ("pc"."relkind" = 'm') AND ("pa"."attnum" >= 1) AND ("pn"."nspname" IN ($2)) ORDER BY "table-schema" ASC, "table-name" ASC, "database-position" ASC;

-- query: describe-table: get-table-pks (sales.orders)
-- source: metabase/metabase@00c37c6669cda403ee73601d8d7c8b2926d3de42 src/metabase/driver/sql_jdbc/sync/describe_table.clj get-table-pks; pgjdbc/pgjdbc@3a699d57d957ca0c2b86e619d001a8763a130027 pgjdbc/src/main/java/org/postgresql/jdbc/PgDatabaseMetaData.java getPrimaryKeys
-- protocol: extended
-- params: [["varchar", "sales"], ["varchar", "orders"]]
SELECT        result.TABLE_CAT AS "TABLE_CAT",        result.TABLE_SCHEM AS "TABLE_SCHEM",        result.TABLE_NAME AS "TABLE_NAME",        result.COLUMN_NAME AS "COLUMN_NAME",        result.KEY_SEQ AS "KEY_SEQ",        result.PK_NAME AS "PK_NAME"FROM      (SELECT current_database() AS TABLE_CAT, n.nspname AS TABLE_SCHEM,   ct.relname AS TABLE_NAME, a.attname AS COLUMN_NAME,   (information_schema._pg_expandarray(con.conkey)).n AS KEY_SEQ, con.conname AS PK_NAME,   information_schema._pg_expandarray(con.conkey) AS KEYS, a.attnum AS A_ATTNUM FROM pg_catalog.pg_constraint con   JOIN pg_catalog.pg_class ct ON (con.conrelid = ct.oid)   JOIN pg_catalog.pg_namespace n ON (ct.relnamespace = n.oid)   JOIN pg_catalog.pg_attribute a ON (a.attrelid = ct.oid) WHERE con.contype = 'p'  AND n.nspname = $1 AND ct.relname = $2 ) result where  result.A_ATTNUM = (result.KEYS).x  ORDER BY result.table_name, result.pk_name, result.key_seq;

-- query: describe-fks (schema sales)
-- source: metabase/metabase@008fd6675457cdd62da2265628bed3b725a607ea src/metabase/driver/postgres.clj describe-fks-sql
-- protocol: extended
-- params: [["varchar", "sales"]]
SELECT "fk_ns"."nspname" AS "fk-table-schema", "fk_table"."relname" AS "fk-table-name", "fk_column"."attname" AS "fk-column-name", "pk_ns"."nspname" AS "pk-table-schema", "pk_table"."relname" AS "pk-table-name", "pk_column"."attname" AS "pk-column-name" FROM "pg_constraint" AS "c" INNER JOIN "pg_class" AS "fk_table" ON "c"."conrelid" = "fk_table"."oid" INNER JOIN "pg_namespace" AS "fk_ns" ON "c"."connamespace" = "fk_ns"."oid" INNER JOIN "pg_attribute" AS "fk_column" ON "c"."conrelid" = "fk_column"."attrelid" INNER JOIN "pg_class" AS "pk_table" ON "c"."confrelid" = "pk_table"."oid" INNER JOIN "pg_namespace" AS "pk_ns" ON "pk_table"."relnamespace" = "pk_ns"."oid" INNER JOIN "pg_attribute" AS "pk_column" ON "c"."confrelid" = "pk_column"."attrelid" WHERE fk_ns.nspname !~ '^information_schema|catalog_history|pg_' AND ("c"."contype" = 'f'::char) AND ("fk_column"."attnum" = ANY(c.conkey)) AND ("pk_column"."attnum" = ANY(c.confkey)) AND ("fk_ns"."nspname" IN ($1)) ORDER BY "fk-table-schema" ASC, "fk-table-name" ASC;

-- query: postgres driver: current-user-table-privileges
-- source: metabase/metabase@008fd6675457cdd62da2265628bed3b725a607ea src/metabase/driver/postgres.clj current-user-table-privileges (the :table-privileges feature, which only the postgres driver itself has)
-- protocol: extended
with table_privileges as (
 select
   NULL as role,
   t.schemaname as schema,
   t.objectname as table,
   pg_catalog.has_any_column_privilege(current_user, '"' || replace(t.schemaname, '"', '""') || '"' || '.' || '"' || replace(t.objectname, '"', '""') || '"',  'update') as update,
   pg_catalog.has_any_column_privilege(current_user, '"' || replace(t.schemaname, '"', '""') || '"' || '.' || '"' || replace(t.objectname, '"', '""') || '"',  'select') as select,
   pg_catalog.has_any_column_privilege(current_user, '"' || replace(t.schemaname, '"', '""') || '"' || '.' || '"' || replace(t.objectname, '"', '""') || '"',  'insert') as insert,
   pg_catalog.has_table_privilege(     current_user, '"' || replace(t.schemaname, '"', '""') || '"' || '.' || '"' || replace(t.objectname, '"', '""') || '"',  'delete') as delete
 from (
   select schemaname, tablename as objectname from pg_catalog.pg_tables
   union
   select schemaname, viewname as objectname from pg_catalog.pg_views
   union
   select schemaname, matviewname as objectname from pg_catalog.pg_matviews
 ) t
 where t.schemaname !~ '^pg_'
   and t.schemaname <> 'information_schema'
   and pg_catalog.has_schema_privilege(current_user, t.schemaname, 'usage')
)
select t.*
from table_privileges t;

-- query: postgres driver: describe-database's get-tables-sql
-- source: metabase/metabase@008fd6675457cdd62da2265628bed3b725a607ea src/metabase/driver/postgres.clj get-tables-sql
-- note: the postgres driver's own query, which reads pg_stat_user_tables
-- protocol: extended
-- params: [["int8", 0], ["varchar", "^pg_"], ["varchar", "information_schema"], ["varchar", "sales"]]
SELECT "n"."nspname" AS "schema", "c"."relname" AS "name", CASE "c"."relkind" WHEN 'r' THEN 'TABLE' WHEN 'p' THEN 'PARTITIONED TABLE' WHEN 'v' THEN 'VIEW' WHEN 'f' THEN 'FOREIGN TABLE' WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE NULL END AS "type", "d"."description" AS "description", "stat"."n_live_tup" AS "estimated_row_count" FROM "pg_catalog"."pg_class" AS "c" INNER JOIN "pg_catalog"."pg_namespace" AS "n" ON "c"."relnamespace" = "n"."oid" LEFT JOIN "pg_catalog"."pg_description" AS "d" ON ("c"."oid" = "d"."objoid") AND ("d"."objsubid" = $1) AND ("d"."classoid" = 'pg_class'::regclass) LEFT JOIN "pg_stat_user_tables" AS "stat" ON ("n"."nspname" = "stat"."schemaname") AND ("c"."relname" = "stat"."relname") WHERE ("c"."relnamespace" = "n"."oid") AND ("n"."nspname" !~ $2) AND ("n"."nspname" <> $3) AND c.relkind in ('r', 'p', 'v', 'f', 'm') AND ("n"."nspname" IN ($4)) ORDER BY "type" ASC, "schema" ASC, "name" ASC;
