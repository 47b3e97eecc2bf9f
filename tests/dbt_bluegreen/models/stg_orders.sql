-- The orders that count.
select order_id, customer_id, amount
from {{ source('raw', 'orders') }}
where status <> 'returned'
