-- Allowlist entries carry their port: "127.0.0.0/8:8081" opens that port of
-- the range; an entry without one opens 80 and 443 only. Before, every entry
-- was open on 80, 443 and each of the tenant's extra ports, so each entry
-- gains one entry per extra port: every address reachable before is
-- reachable after, and nothing more. The extra ports stay for public
-- addresses. The table's row security is forced, so the owner lifts it for
-- this one statement.
ALTER TABLE tenant_egress NO FORCE ROW LEVEL SECURITY;
UPDATE tenant_egress
   SET allow = allow || ARRAY(
       SELECT CASE WHEN position(':' IN e) > 0 THEN '[' || e || ']:' || p ELSE e || ':' || p END
         FROM unnest(allow) WITH ORDINALITY AS a(e, i), unnest(ports) WITH ORDINALITY AS q(p, j)
        ORDER BY i, j)
 WHERE cardinality(allow) > 0 AND cardinality(ports) > 0;
ALTER TABLE tenant_egress FORCE ROW LEVEL SECURITY;
COMMENT ON COLUMN tenant_egress.allow IS 'entries RANGE[:PORT] (127.0.0.0/8:8081, [::1]:8081); without a port: 80 and 443';
COMMENT ON COLUMN tenant_egress.ports IS 'extra ports public addresses may use';
