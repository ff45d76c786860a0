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

-- sliced(src): every row of the facts named src (query_facts or flow_facts) once per grain, with
-- the grain's keys (a key the grain does not use reads '*'; hexagon attributes only at hexagon
-- grains). The marts group these; a filter on `grain` reaches the VALUES list above, so a mart
-- reads the facts once.
CREATE OR REPLACE MACRO sliced(src) AS TABLE
SELECT
    g.grain,
    g.period,
    CASE WHEN g.period = 'hour' THEN f.hour ELSE f.week_start END                   AS period_start,
    CASE WHEN g.period = 'hour' THEN iso_week(f.hour) ELSE f.week END               AS week,
    CASE WHEN g.by_carrier THEN f.carrier ELSE '*' END                              AS carrier,
    CASE WHEN g.by_hexagon THEN f.h3_cell ELSE '*' END                              AS h3_cell,
    CASE WHEN g.by_site THEN f.site ELSE '*' END                                    AS site,
    CASE WHEN g.by_network_type THEN f.network_type ELSE '*' END                    AS network_type,
    CASE WHEN g.by_hexagon THEN f.region END                                        AS region,
    CASE WHEN g.by_hexagon THEN f.h3_lat END                                        AS h3_lat,
    CASE WHEN g.by_hexagon THEN f.h3_lng END                                        AS h3_lng,
    CASE WHEN g.by_hexagon THEN f.h3_boundary_geojson END                           AS h3_boundary_geojson,
    f.* EXCLUDE (week, carrier, h3_cell, site, network_type, region, h3_lat, h3_lng, h3_boundary_geojson)
FROM query_table(src) f
CROSS JOIN mart_grains g;

-- query_slices / flow_slices: the facts the marts group, sliced by every grain. (A flow's hour lies
-- in its week, so iso_week(hour) is the flow's week at every grain.)
CREATE OR REPLACE VIEW query_slices AS
SELECT
    grain, period, period_start, week, carrier, h3_cell, site, network_type,
    region, h3_lat, h3_lng, h3_boundary_geojson,
    flow_id, query_index, protocol, latency_ns, setup_ns, attributed_delay_ns, signatures, delays,
    COLUMNS('^budget_.*_ns$')
FROM sliced('query_facts');

CREATE OR REPLACE VIEW flow_slices AS
SELECT
    grain, period, period_start, week, carrier, h3_cell, site, network_type,
    region, h3_lat, h3_lng, h3_boundary_geojson,
    flow_id, protocol, packets, bytes, retransmissions, lossy, loss_in_establishment, loss_in_data, signatures,
    handshake_rtt_ms, quic_handshake_rtt_ms
FROM sliced('flow_facts');
