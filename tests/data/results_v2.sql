-- A results store written by term-fl 0.2.0 before the reshaping (results schema version 2), as `sqlite3 .dump` prints it.
-- Made by ResultsStore of schema version 2 (commit 8f6b2b6): a TERM run whose rounds hold running estimates
-- (0.1 + 0.2 and 1/3: every digit must survive the migration; round 3 failed, no estimate) and a FedAvg run.
PRAGMA application_id = 1414678092;
PRAGMA user_version = 2;
BEGIN TRANSACTION;
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
INSERT INTO runs VALUES('v2-term','v2-term','legacy-v2','inprocess','term','{"t": 20.0, "lam": 0.5, "tau": 0.0}',0,'hash-term','{"name": "legacy-v2"}','{"name": "synthetic", "path": null, "sha256": null}','finished',NULL,3,3,1795683964.7672379016,1795683964.7680392264,NULL,'{"run_id": "v2-term", "status": "finished"}',1795683964.7679810524);
INSERT INTO runs VALUES('v2-fedavg','v2-fedavg','legacy-v2','inprocess','fedavg','{"tau": 0.0}',0,'hash-fedavg','{"name": "legacy-v2"}','{"name": "synthetic", "path": null, "sha256": null}','finished',NULL,3,3,1795683964.768107891,1795683964.7684867382,NULL,'{"run_id": "v2-fedavg", "status": "finished"}',1795683964.7684319019);
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
INSERT INTO rounds VALUES('v2-fedavg',1,'ok',NULL,1,1,0.10000000000000000555,'[]');
INSERT INTO rounds VALUES('v2-fedavg',2,'ok',NULL,1,1,0.10000000000000000555,'[]');
INSERT INTO rounds VALUES('v2-fedavg',3,'failed',NULL,1,0,0.10000000000000000555,'[{"node_id": 7, "partition_id": 0, "reason": "error reply"}]');
INSERT INTO rounds VALUES('v2-term',1,'ok',0.3000000000000000444,1,1,0.10000000000000000555,'[]');
INSERT INTO rounds VALUES('v2-term',2,'ok',0.33333333333333331482,1,1,0.10000000000000000555,'[]');
INSERT INTO rounds VALUES('v2-term',3,'failed',NULL,1,0,0.10000000000000000555,'[{"node_id": 7, "partition_id": 0, "reason": "error reply"}]');
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
INSERT INTO device_train VALUES('v2-fedavg',1,0,1,1,0.5,0.25,1.0,10);
INSERT INTO device_train VALUES('v2-fedavg',2,0,1,1,0.5,0.25,1.0,10);
INSERT INTO device_train VALUES('v2-fedavg',3,0,1,0,NULL,NULL,NULL,NULL);
INSERT INTO device_train VALUES('v2-term',1,0,1,1,0.5,0.25,1.0,10);
INSERT INTO device_train VALUES('v2-term',2,0,1,1,0.5,0.25,1.0,10);
INSERT INTO device_train VALUES('v2-term',3,0,1,0,NULL,NULL,NULL,NULL);
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
INSERT INTO device_eval VALUES('v2-fedavg',1,0,'test',0.4000000000000000222,0.75,3,4);
INSERT INTO device_eval VALUES('v2-fedavg',2,0,'test',0.4000000000000000222,0.75,3,4);
INSERT INTO device_eval VALUES('v2-fedavg',3,0,'test',0.4000000000000000222,0.75,3,4);
INSERT INTO device_eval VALUES('v2-term',1,0,'test',0.4000000000000000222,0.75,3,4);
INSERT INTO device_eval VALUES('v2-term',2,0,'test',0.4000000000000000222,0.75,3,4);
INSERT INTO device_eval VALUES('v2-term',3,0,'test',0.4000000000000000222,0.75,3,4);
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
INSERT INTO round_stats VALUES('v2-fedavg',1,'test',0.75,0.75,0.75,NULL,NULL,'{"mean": 0.75, "pooled_mean": 0.75, "worst_10": 0.75}');
INSERT INTO round_stats VALUES('v2-fedavg',2,'test',0.75,0.75,0.75,NULL,NULL,'{"mean": 0.75, "pooled_mean": 0.75, "worst_10": 0.75}');
INSERT INTO round_stats VALUES('v2-fedavg',3,'test',0.75,0.75,0.75,NULL,NULL,'{"mean": 0.75, "pooled_mean": 0.75, "worst_10": 0.75}');
INSERT INTO round_stats VALUES('v2-term',1,'test',0.75,0.75,0.75,NULL,NULL,'{"mean": 0.75, "pooled_mean": 0.75, "worst_10": 0.75}');
INSERT INTO round_stats VALUES('v2-term',2,'test',0.75,0.75,0.75,NULL,NULL,'{"mean": 0.75, "pooled_mean": 0.75, "worst_10": 0.75}');
INSERT INTO round_stats VALUES('v2-term',3,'test',0.75,0.75,0.75,NULL,NULL,'{"mean": 0.75, "pooled_mean": 0.75, "worst_10": 0.75}');
CREATE INDEX runs_by_scenario ON runs (scenario, started_at);
CREATE INDEX runs_by_config_hash ON runs (config_hash, started_at);
CREATE INDEX runs_by_started_at ON runs (started_at);
COMMIT;
