"""Client quotas (Kafka's ``ClientQuotaManager`` and its quota callback): the quotas AlterClientQuotas
stores in the data directory (:mod:`.quota_store`) and the rates measured against them, with Kafka's
precedence of user, client-id and default entities (:mod:`.quotas`). The handlers apply them
(``server/handlers/throttling.py``); the network layer mutes a throttled connection."""
