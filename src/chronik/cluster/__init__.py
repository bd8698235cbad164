"""Many brokers, one Kafka cluster: the ZooKeeper session, the controller, the cluster view.

Switched on by `zookeeper.connect`; without it chronik is a single node and nothing
here is imported.
"""
