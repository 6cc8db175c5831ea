"""Who a connection is and what it may do (Kafka's ``security`` packages): SASL
(:mod:`.sasl`, :mod:`.sasl_mechanisms`, :mod:`.sasl_credentials`, the SCRAM credentials of the data
directory :mod:`.scram_store`), TLS (:mod:`.tls`), principals (:mod:`.principal`), and the
``StandardAuthorizer`` with its ACLs (:mod:`.authorizer`, :mod:`.acl_operations`,
:mod:`.acl_store`). No broker state, no handlers."""
