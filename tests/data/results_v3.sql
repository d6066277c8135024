-- A results store written by term-fl at results schema version 3 (before the risk columns of version 4),
-- as `sqlite3 .dump` prints it. Made by ResultsStore of schema version 3 (commit 55f2a62): one finished run
-- of 2 rounds (its round 2 has a NaN EVaR, stored as JSON null), one that stopped after round 1.
PRAGMA application_id = 1414678092;
PRAGMA user_version = 3;
BEGIN TRANSACTION;
CREATE TABLE device_eval (
        run_id TEXT NOT NULL,
        round INTEGER NOT NULL,
        partition_id INTEGER NOT NULL CHECK (typeof(partition_id) = 'integer'),
        split TEXT NOT NULL CHECK (split IN ('val', 'test')),
        loss REAL CHECK (typeof(loss) IN ('real', 'null')),
        accuracy REAL CHECK (typeof(accuracy) IN ('real', 'null')),
        correct INTEGER NOT NULL CHECK (typeof(correct) = 'integer'),
        examples INTEGER NOT NULL CHECK (typeof(examples) = 'integer'),
        PRIMARY KEY (run_id, round, split, partition_id),
        FOREIGN KEY (run_id, round) REFERENCES rounds (run_id, round)
            ON DELETE CASCADE
    ) WITHOUT ROWID;
INSERT INTO "device_eval" VALUES('v3-finished',1,0,'test',0.4,0.75,3,4);
INSERT INTO "device_eval" VALUES('v3-finished',1,0,'val',0.4,0.75,3,4);
INSERT INTO "device_eval" VALUES('v3-finished',2,0,'test',0.4,0.75,3,4);
INSERT INTO "device_eval" VALUES('v3-finished',2,0,'val',0.4,0.75,3,4);
INSERT INTO "device_eval" VALUES('v3-running',1,0,'test',0.4,0.75,3,4);
INSERT INTO "device_eval" VALUES('v3-running',1,0,'val',0.4,0.75,3,4);
CREATE TABLE device_train (
        run_id TEXT NOT NULL,
        round INTEGER NOT NULL,
        partition_id INTEGER NOT NULL CHECK (typeof(partition_id) = 'integer'),
        sampled INTEGER NOT NULL CHECK (sampled IN (0, 1)),
        included INTEGER NOT NULL CHECK (included IN (0, 1)),
        train_loss REAL CHECK (typeof(train_loss) IN ('real', 'null')),
        train_loss_after REAL CHECK (typeof(train_loss_after) IN ('real', 'null')),
        tilted_weight REAL CHECK (typeof(tilted_weight) IN ('real', 'null')),
        num_examples INTEGER CHECK (typeof(num_examples) IN ('integer', 'null')),
        PRIMARY KEY (run_id, round, partition_id),
        FOREIGN KEY (run_id, round) REFERENCES rounds (run_id, round)
            ON DELETE CASCADE
    ) WITHOUT ROWID;
INSERT INTO "device_train" VALUES('v3-finished',1,0,1,1,0.5,NULL,1.0,4);
INSERT INTO "device_train" VALUES('v3-finished',2,0,1,1,0.5,NULL,1.0,4);
INSERT INTO "device_train" VALUES('v3-running',1,0,1,1,0.5,NULL,1.0,4);
CREATE TABLE round_stats (
        run_id TEXT NOT NULL,
        round INTEGER NOT NULL,
        split TEXT NOT NULL CHECK (split IN ('val', 'test')),
        mean REAL, pooled_mean REAL, worst_10 REAL, best_10 REAL, std REAL,
        stats_json TEXT NOT NULL,
        PRIMARY KEY (run_id, round, split),
        FOREIGN KEY (run_id, round) REFERENCES rounds (run_id, round)
            ON DELETE CASCADE
    ) WITHOUT ROWID;
INSERT INTO "round_stats" VALUES('v3-finished',1,'test',0.6,0.55,0.25,0.75,0.1,'{"mean": 0.6, "pooled_mean": 0.55, "worst_10": 0.25, "best_10": 0.75, "std": 0.1, "K": 2, "alpha": 0.1, "var": 1.4, "cvar": 1.5, "evar": 0.9, "evar_t": null, "tivar": 1.6, "tivar_t": 2.0}');
INSERT INTO "round_stats" VALUES('v3-finished',1,'val',0.6,0.55,0.25,0.75,0.1,'{"mean": 0.6, "pooled_mean": 0.55, "worst_10": 0.25, "best_10": 0.75, "std": 0.1, "K": 2, "alpha": 0.1, "var": 1.4, "cvar": 1.5, "evar": 0.9, "evar_t": null, "tivar": 1.6, "tivar_t": 2.0}');
INSERT INTO "round_stats" VALUES('v3-finished',2,'test',0.7,0.55,0.25,0.75,0.1,'{"mean": 0.7, "pooled_mean": 0.55, "worst_10": 0.25, "best_10": 0.75, "std": 0.1, "K": 2, "alpha": 0.1, "var": 2.4, "cvar": 2.5, "evar": null, "evar_t": null, "tivar": 2.6, "tivar_t": 2.0}');
INSERT INTO "round_stats" VALUES('v3-finished',2,'val',0.7,0.55,0.25,0.75,0.1,'{"mean": 0.7, "pooled_mean": 0.55, "worst_10": 0.25, "best_10": 0.75, "std": 0.1, "K": 2, "alpha": 0.1, "var": 2.4, "cvar": 2.5, "evar": null, "evar_t": null, "tivar": 2.6, "tivar_t": 2.0}');
INSERT INTO "round_stats" VALUES('v3-running',1,'test',0.6,0.55,0.25,0.75,0.1,'{"mean": 0.6, "pooled_mean": 0.55, "worst_10": 0.25, "best_10": 0.75, "std": 0.1, "K": 2, "alpha": 0.1, "var": 1.4, "cvar": 1.5, "evar": 0.9, "evar_t": null, "tivar": 1.6, "tivar_t": 2.0}');
INSERT INTO "round_stats" VALUES('v3-running',1,'val',0.6,0.55,0.25,0.75,0.1,'{"mean": 0.6, "pooled_mean": 0.55, "worst_10": 0.25, "best_10": 0.75, "std": 0.1, "K": 2, "alpha": 0.1, "var": 1.4, "cvar": 1.5, "evar": 0.9, "evar_t": null, "tivar": 1.6, "tivar_t": 2.0}');
CREATE TABLE rounds (
        run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
        round INTEGER NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('ok', 'failed')),
        num_sampled INTEGER NOT NULL,
        num_included INTEGER NOT NULL,
        duration_s REAL,
        excluded_json TEXT NOT NULL,
        diagnostics_json TEXT NOT NULL DEFAULT '{}',
        PRIMARY KEY (run_id, round)
    ) WITHOUT ROWID;
INSERT INTO "rounds" VALUES('v3-finished',1,'ok',1,1,0.1,'[]','{"running_estimate": 0.1234567890123456}');
INSERT INTO "rounds" VALUES('v3-finished',2,'ok',1,1,0.1,'[]','{"running_estimate": 0.1234567890123456}');
INSERT INTO "rounds" VALUES('v3-running',1,'ok',1,1,0.1,'[]','{"running_estimate": 0.1234567890123456}');
CREATE TABLE runs (
        run_id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        scenario TEXT NOT NULL,
        engine TEXT NOT NULL,
        strategy TEXT NOT NULL,
        strategy_params_json TEXT NOT NULL,
        seed INTEGER NOT NULL,
        config_hash TEXT NOT NULL,
        config_json TEXT NOT NULL,
        data_json TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('running', 'finished', 'failed', 'interrupted')),
        error TEXT,
        rounds_planned INTEGER NOT NULL,
        rounds_completed INTEGER NOT NULL DEFAULT 0,
        started_at REAL NOT NULL,
        finished_at REAL,
        run_dir TEXT,
        summary_json TEXT,
        heartbeat_at REAL
    );
INSERT INTO "runs" VALUES('v3-finished','v3-finished','legacy','inprocess','term','{"t": 1.0, "tau": 0.0}',0,'legacy-hash','{"name": "legacy"}','{"name": "synthetic", "path": null, "sha256": null}','finished',NULL,2,2,1.79568524381666707991e+09,1.79568524383811902993e+09,'/runs/v3-finished','{"run_id": "v3-finished", "status": "finished"}',1.79568524383804202079e+09);
INSERT INTO "runs" VALUES('v3-running','v3-running','legacy','inprocess','term','{"t": 1.0, "tau": 0.0}',0,'legacy-hash','{"name": "legacy"}','{"name": "synthetic", "path": null, "sha256": null}','running',NULL,2,1,1.79568524383817458155e+09,NULL,'/runs/v3-running',NULL,1.79568524383836770064e+09);
CREATE INDEX runs_by_scenario ON runs (scenario, started_at);
CREATE INDEX runs_by_config_hash ON runs (config_hash, started_at);
CREATE INDEX runs_by_started_at ON runs (started_at);
COMMIT;
