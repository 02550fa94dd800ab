-- An agent may be an enrolled assistant (the local AI browser agent): its
-- latest progress report (tasks, spend, pending approvals; no page text,
-- draft or secret) is kept on its row for the console. Row-level security
-- of agents covers it.
ALTER TABLE agents ADD COLUMN assistant_report jsonb;
ALTER TABLE agents ADD COLUMN assistant_report_at timestamptz;
