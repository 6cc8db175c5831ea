"""kafkalog.record"""
