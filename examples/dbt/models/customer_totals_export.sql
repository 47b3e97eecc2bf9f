-- A sink: the dbt-materialize materialization writes `create sink <this> in cluster <c>`
-- and then this body. mzflow's sinks write files, so the body names a folder.
{{ config(materialized='sink', cluster='analytics') }}
from {{ ref('customer_totals') }}
into parquet '{{ var("export_path") }}'
with (envelope = upsert, key = (customer_id), schedule = '@daily')
