-- mart_grains: the grains the marts are computed at. A grain is a period (ISO week or hour, UTC)
-- and the dimensions kept; a dimension not kept reads '*' in the marts. Percentiles do not add
-- up, so every grain is computed from the facts, never rolled up from a finer one.
CREATE OR REPLACE VIEW mart_grains AS
SELECT * FROM (VALUES
    ('week',            'week', false, false, false, false),
    ('carrier',         'week', true,  false, false, false),
    ('hexagon',         'week', false, true,  false, false),
    ('carrier_hexagon', 'week', true,  true,  false, false),
    ('site',            'week', false, false, true,  false),
    ('network_type',    'week', false, false, false, true),
    ('hour',            'hour', false, false, false, false),
    ('carrier_hour',    'hour', true,  false, false, false)
) AS g(grain, period, by_carrier, by_hexagon, by_site, by_network_type);

-- query_slices / flow_slices: every fact once per grain, with the grain's keys. The marts group
-- these; a filter on `grain` reaches the VALUES list above, so a mart reads the facts once.
CREATE OR REPLACE VIEW query_slices AS
SELECT
    g.grain,
    g.period,
    CASE WHEN g.period = 'hour' THEN q.hour ELSE q.week_start END                   AS period_start,
    CASE WHEN g.period = 'hour' THEN strftime(timezone('UTC', q.hour), '%G-W%V') ELSE q.week END AS week,
    CASE WHEN g.by_carrier THEN q.carrier ELSE '*' END                              AS carrier,
    CASE WHEN g.by_hexagon THEN q.h3_cell ELSE '*' END                              AS h3_cell,
    CASE WHEN g.by_site THEN q.site ELSE '*' END                                    AS site,
    CASE WHEN g.by_network_type THEN q.network_type ELSE '*' END                    AS network_type,
    CASE WHEN g.by_hexagon THEN q.region END                                        AS region,
    CASE WHEN g.by_hexagon THEN q.h3_lat END                                        AS h3_lat,
    CASE WHEN g.by_hexagon THEN q.h3_lng END                                        AS h3_lng,
    CASE WHEN g.by_hexagon THEN q.h3_boundary_geojson END                           AS h3_boundary_geojson,
    q.flow_id,
    q.query_index,
    q.latency_ns,
    q.setup_ns,
    q.attributed_delay_ns,
    q.signatures,
    q.delays
FROM query_facts q
CROSS JOIN mart_grains g;

CREATE OR REPLACE VIEW flow_slices AS
SELECT
    g.grain,
    g.period,
    CASE WHEN g.period = 'hour' THEN f.hour ELSE f.week_start END                   AS period_start,
    f.week,
    CASE WHEN g.by_carrier THEN f.carrier ELSE '*' END                              AS carrier,
    CASE WHEN g.by_hexagon THEN f.h3_cell ELSE '*' END                              AS h3_cell,
    CASE WHEN g.by_site THEN f.site ELSE '*' END                                    AS site,
    CASE WHEN g.by_network_type THEN f.network_type ELSE '*' END                    AS network_type,
    CASE WHEN g.by_hexagon THEN f.region END                                        AS region,
    CASE WHEN g.by_hexagon THEN f.h3_lat END                                        AS h3_lat,
    CASE WHEN g.by_hexagon THEN f.h3_lng END                                        AS h3_lng,
    CASE WHEN g.by_hexagon THEN f.h3_boundary_geojson END                           AS h3_boundary_geojson,
    f.flow_id,
    f.protocol,
    f.packets,
    f.bytes,
    f.retransmissions,
    f.lossy,
    f.loss_in_establishment,
    f.loss_in_data,
    f.signatures
FROM flow_facts f
CROSS JOIN mart_grains g;
