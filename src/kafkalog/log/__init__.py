"""kafkalog.log"""
