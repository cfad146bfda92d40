-- Where a run was submitted from. A local dev stack (and an agent started for local
-- work) runs the script there, so relative paths resolve as they would by hand; a
-- deployed agent ignores it and runs in a scratch directory. Children inherit it.

ALTER TABLE cryo.runs ADD COLUMN workdir text;

COMMENT ON COLUMN cryo.runs.workdir IS
    'The directory the run was submitted from (absolute; NULL when not given). Agents for local work run the script there; others run it in a scratch directory.';
