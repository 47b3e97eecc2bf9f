-- TPC-H Q17 (small-quantity-order revenue), BRAND = Brand#44, CONTAINER = WRAP CAN
-- (the spec's Brand#23 / MED BOX selects nothing at scale 0.01)
select
    sum(l_extendedprice) / 7.0 as avg_yearly
from
    lineitem,
    part
where
    p_partkey = l_partkey
    and p_brand = 'Brand#44'
    and p_container = 'WRAP CAN'
    and l_quantity < (
        select
            0.2 * avg(l_quantity)
        from
            lineitem
        where
            l_partkey = p_partkey
    )
