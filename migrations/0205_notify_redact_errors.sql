-- Delivery errors stored before webhook URLs were redacted quote the whole
-- URL (a url.Error's text), with the receiver's token in its path or query:
-- keep the scheme and host of every quoted URL, drop the rest (an address
-- already shortened to scheme://host/… is left as it is). The table's
-- row security is forced, so the owner lifts it for this one statement.
ALTER TABLE notify_deliveries NO FORCE ROW LEVEL SECURITY;
UPDATE notify_deliveries
   SET last_error = regexp_replace(last_error, '(https?://[^/?#\s"]+)[/?#](?!…(:|\s|$))[^\s"]*', '\1/…', 'g')
 WHERE last_error ~ 'https?://[^/?#\s"]+[/?#](?!…(:|\s|$))';
ALTER TABLE notify_deliveries FORCE ROW LEVEL SECURITY;
