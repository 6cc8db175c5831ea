"""kafkalog.cli"""
