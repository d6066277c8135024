-- A results store written by term-fl 0.1 (results schema version 1), as `sqlite3 .dump` prints it.
-- Made by ResultsStore of schema version 1: one finished run, one that crashed after round 1.
PRAGMA application_id = 1414678092;
PRAGMA user_version = 1;
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
INSERT INTO "device_eval" VALUES('v1-crashed',1,0,'test',0.4,0.75,3,4);
INSERT INTO "device_eval" VALUES('v1-crashed',1,0,'val',0.3,1.0,2,2);
INSERT INTO "device_eval" VALUES('v1-finished',1,0,'test',0.4,0.75,3,4);
INSERT INTO "device_eval" VALUES('v1-finished',1,0,'val',0.3,1.0,2,2);
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
INSERT INTO "device_train" VALUES('v1-crashed',1,0,1,1,0.5,NULL,1.0,10);
INSERT INTO "device_train" VALUES('v1-finished',1,0,1,1,0.5,NULL,1.0,10);
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
INSERT INTO "round_stats" VALUES('v1-crashed',1,'test',0.75,0.75,0.75,NULL,NULL,'{"mean": 0.75, "pooled_mean": 0.75, "worst_10": 0.75}');
INSERT INTO "round_stats" VALUES('v1-finished',1,'test',0.75,0.75,0.75,NULL,NULL,'{"mean": 0.75, "pooled_mean": 0.75, "worst_10": 0.75}');
CREATE TABLE rounds (
        run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
        round INTEGER NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('ok', 'failed')),
        running_estimate REAL,
        num_sampled INTEGER NOT NULL,
        num_included INTEGER NOT NULL,
        duration_s REAL,
        excluded_json TEXT NOT NULL,
        PRIMARY KEY (run_id, round)
    ) WITHOUT ROWID;
INSERT INTO "rounds" VALUES('v1-crashed',1,'ok',NULL,1,1,0.1,'[]');
INSERT INTO "rounds" VALUES('v1-finished',1,'ok',NULL,1,1,0.1,'[]');
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
        summary_json TEXT
    );
INSERT INTO "runs" VALUES('v1-finished','v1-finished','legacy','inprocess','term','{"t": 1.0, "tau": 0.0}',0,'legacy-hash','{"name": "legacy"}','{"name": "synthetic", "path": null, "sha256": null}','finished',NULL,2,1,1.79568118532650947572e+09,1.79568118532729530329e+09,'/runs/v1-finished','{"run_id": "v1-finished", "status": "finished"}');
INSERT INTO "runs" VALUES('v1-crashed','v1-crashed','legacy','inprocess','term','{"t": 1.0, "tau": 0.0}',0,'legacy-hash','{"name": "legacy"}','{"name": "synthetic", "path": null, "sha256": null}','running',NULL,2,1,1.79568118532739639278e+09,NULL,'/runs/v1-crashed',NULL);
CREATE INDEX runs_by_scenario ON runs (scenario, started_at);
CREATE INDEX runs_by_config_hash ON runs (config_hash, started_at);
CREATE INDEX runs_by_started_at ON runs (started_at);
COMMIT;
