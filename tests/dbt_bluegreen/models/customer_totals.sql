{{ config(materialized='materialized_view', cluster='analytics',
          indexes=[{'columns': ['customer_id']}]) }}
select customer_id, count(*) as orders, sum(amount) as total
from {{ ref('stg_orders') }}
group by customer_id
