-- What dbt-materialize asks of the catalog, rendered from its macros
-- (MaterializeInc/materialize, misc/dbt-materialize/dbt/include/materialize/macros:
-- adapters.sql's list_relations_without_caching, catalog.sql's get_catalog and
-- get_catalog_relations) and dbt-postgres's get_columns_in_relation, for database
-- materialize and the schemas public and s2.

-- query: dbt list_relations_without_caching(public)
select
    d.name as database,
    s.name as schema,
    o.name,
    case when o.type = 'materialized-view' then 'materializedview'
         else o.type
    end as type
from mz_objects o
left join mz_sources so on o.id = so.id
join mz_schemas s on o.schema_id = s.id and s.name = 'public'
join mz_databases d on s.database_id = d.id and d.name = 'materialize'
where o.type in ('table', 'source', 'view', 'materialized-view', 'index', 'sink')
  --Exclude subsources and progress subsources, which aren't relevant in this
  --context and can bork the adapter (see #20483)
  and coalesce(so.type, '') not in ('subsource', 'progress');

-- query: dbt get_catalog(public, s2)
with tables as (
    select
        d.name as table_database,
        s.name as table_schema,
        o.name as table_name,
        case
            when o.type = 'source' then so.type
            else o.type end as table_type,
        obj_desc.comment as table_comment,
        r.name as table_owner
    from mz_objects o
    join mz_schemas s on o.schema_id = s.id
    join mz_databases d on s.database_id = d.id and d.name = 'materialize'
    join mz_roles r on o.owner_id = r.id
    left join mz_sources so on o.id = so.id
    left outer join mz_internal.mz_comments obj_desc on (o.id = obj_desc.id and obj_desc.object_sub_id is null)
    where (upper(s.name) = upper('public') or upper(s.name) = upper('s2'))
),
columns as (
    select
        d.name as table_database,
        s.name as table_schema,
        o.name as table_name,
        c.name as column_name,
        c.position as column_index,
        c.type as column_type,
        col_desc.comment as column_comment
    from mz_objects o
    join mz_schemas s on o.schema_id = s.id
    join mz_databases d on s.database_id = d.id and d.name = 'materialize'
    join mz_columns c on c.id = o.id
    left outer join mz_internal.mz_comments col_desc on (o.id = col_desc.id and col_desc.object_sub_id = c.position)
    where (upper(s.name) = upper('public') or upper(s.name) = upper('s2'))
)
select *
from tables
join columns using ("table_database", "table_schema", "table_name")
order by "column_index";

-- query: dbt get_catalog_relations(public.t, s2.u)
with tables as (
    select
        d.name as table_database,
        s.name as table_schema,
        o.name as table_name,
        case
            when o.type = 'source' then so.type
            else o.type end as table_type,
        obj_desc.comment as table_comment,
        r.name as table_owner
    from mz_objects o
    join mz_schemas s on o.schema_id = s.id
    join mz_databases d on s.database_id = d.id and d.name = 'materialize'
    join mz_roles r on o.owner_id = r.id
    left join mz_sources so on o.id = so.id
    left outer join mz_internal.mz_comments obj_desc on (o.id = obj_desc.id and obj_desc.object_sub_id is null)
    where ((upper(s.name) = upper('public') and upper(o.name) = upper('t'))
        or (upper(s.name) = upper('s2') and upper(o.name) = upper('u')))
),
columns as (
    select
        d.name as table_database,
        s.name as table_schema,
        o.name as table_name,
        c.name as column_name,
        c.position as column_index,
        c.type as column_type,
        col_desc.comment as column_comment
    from mz_objects o
    join mz_schemas s on o.schema_id = s.id
    join mz_databases d on s.database_id = d.id and d.name = 'materialize'
    join mz_columns c on c.id = o.id
    left outer join mz_internal.mz_comments col_desc on (o.id = col_desc.id and col_desc.object_sub_id = c.position)
    where ((upper(s.name) = upper('public') and upper(o.name) = upper('t'))
        or (upper(s.name) = upper('s2') and upper(o.name) = upper('u')))
)
select *
from tables
join columns using ("table_database", "table_schema", "table_name")
order by "column_index";

-- query: dbt get_columns_in_relation(public.t)
select
    column_name,
    data_type,
    character_maximum_length,
    numeric_precision,
    numeric_scale
from "materialize".information_schema."columns"
where table_name = 't'
  and table_schema = 'public'
order by ordinal_position;

-- query: dbt list_schemas(materialize)
show schemas from materialize;
